package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/scheduler"
)

const queue = "default"

// demo holds what run started; stop tears it down in reverse order.
type demo struct {
	out     io.Writer
	dir     string
	redis   *localrun.Redis
	etcd    *localrun.Etcd
	scheds  []*process
	workers []*process
	rdb     *redis.Client
	in      *inspect.Inspector // reads the counts over the layout's span, which a resize changes
	target  *target
}

// process is a scheduler or worker with its HTTP (metrics) address.
type process struct {
	*localrun.Proc
	id   string
	http string
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "hourglass-demo-")
	if err != nil {
		return err
	}
	d := &demo{out: out, dir: dir}
	defer func() {
		d.stop()
		if o.keep || err != nil {
			fmt.Fprintf(out, "logs and data kept in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	fmt.Fprintf(out, "hourglass-demo: starting Redis, etcd, %d schedulers and %d workers in %s\n", o.schedulers, o.workers, dir)
	if err := d.start(ctx, o); err != nil {
		return err
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	cli, err := client.New(d.rdb, client.Config{Shards: o.shards})
	if err != nil {
		return err
	}

	var enqueued atomic.Int64
	var wg sync.WaitGroup
	prodCtx, stopProducer := context.WithCancel(ctx)
	defer stopProducer()
	wg.Add(1)
	go func() { // producer, owned by run: stopped and awaited below
		defer wg.Done()
		produce(prodCtx, cli, o, &enqueued, out)
	}()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	started := time.Now()
	var last statusLine
	for {
		select {
		case <-ctx.Done():
			stopProducer()
			wg.Wait()
			fmt.Fprintf(out, "hourglass-demo: stopping after %s; final: %s\n", time.Since(started).Round(time.Second), last)
			return nil
		case <-tick.C:
			last = d.status(enqueued.Load(), last)
			fmt.Fprintf(out, "[%4ds] %s\n", int(time.Since(started).Seconds()), last)
		}
	}
}

func (d *demo) start(ctx context.Context, o options) error {
	var err error
	if d.redis, err = localrun.StartRedis(d.dir); err != nil {
		return err
	}
	if d.etcd, err = localrun.StartEtcd(d.dir); err != nil {
		return err
	}
	d.rdb = redis.NewClient(&redis.Options{Addr: d.redis.Addr})
	if d.in, err = inspect.New(d.rdb, inspect.Config{Shards: o.shards}); err != nil {
		return err
	}
	if d.target, err = startTarget(); err != nil {
		return err
	}
	if err := d.binaries(ctx, o); err != nil {
		return err
	}
	// One configuration for every process: the queue's retry policy is
	// registered by the schedulers; the HTTP target is the workers'.
	common := []string{
		"-set", "redis.addr=" + d.redis.Addr,
		"-set", "etcd.endpoints=" + d.etcd.Endpoint,
		"-set", fmt.Sprintf("shards=%d", o.shards),
		"-set", "queues." + queue + ".max_retries=3",
		"-set", "queues." + queue + ".timeout=10s",
		"-set", "queues." + queue + ".backoff.base=250ms",
		"-set", "queues." + queue + ".backoff.cap=2s",
		"-set", "queues." + queue + ".concurrency=50",
		"-set", "queues." + queue + ".http.url=" + d.target.url,
	}
	for i := 1; i <= o.schedulers; i++ {
		p, err := d.spawn(fmt.Sprintf("scheduler-%d", i), "scheduler", append([]string{"-set", fmt.Sprintf("scheduler.replica_id=scheduler-%d", i)}, common...))
		if err != nil {
			return err
		}
		d.scheds = append(d.scheds, p)
	}
	for i := 1; i <= o.workers; i++ {
		p, err := d.spawn(fmt.Sprintf("worker-%d", i), "worker", common)
		if err != nil {
			return err
		}
		d.workers = append(d.workers, p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		owners := d.owners()
		n := 0
		for _, c := range owners {
			n += c
		}
		if n == o.shards {
			fmt.Fprintf(d.out, "hourglass-demo: all %d shards owned: %s; %d workers; enqueueing %d tasks/s with delays 0-%s (about 15%% fail once or twice, 2%% always fail)\n",
				o.shards, formatOwners(owners), o.workers, o.rate, o.maxDelay)
			fmt.Fprintf(d.out, "hourglass-demo: admin CLI, in another terminal: %s/hourglass --set redis.addr=%s --set etcd.endpoints=%s --set shards=%d queue ls   (also: shards, dlq ls, queue pause %s, ...)\n",
				d.dir, d.redis.Addr, d.etcd.Endpoint, o.shards, queue)
			fmt.Fprintf(d.out, "hourglass-demo: web dashboard: http://%s/ui/\n", d.scheds[0].http)
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("shards not all owned after 30s; see the scheduler logs")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// binaries builds the scheduler, worker and hourglass binaries into the
// demo's directory, or links those in o.bins there: the processes run
// from the directory either way, so that they are found by it.
func (d *demo) binaries(ctx context.Context, o options) error {
	if o.bins != "" {
		for _, b := range []string{"scheduler", "worker", "hourglass"} {
			if err := os.Symlink(filepath.Join(o.bins, b), filepath.Join(d.dir, b)); err != nil {
				return err
			}
		}
		return nil
	}
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", append(append([]string{"build"}, o.goflags...), "-o", d.dir+"/", "./cmd/scheduler", "./cmd/worker", "./cmd/hourglass")...)
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build binaries: %w\n%s", err, b)
	}
	return nil
}

// spawn starts one of the built binaries with its own metrics address.
func (d *demo) spawn(id, bin string, args []string) (*process, error) {
	port, err := localrun.FreePort()
	if err != nil {
		return nil, err
	}
	p := &process{id: id, http: fmt.Sprintf("127.0.0.1:%d", port)}
	p.Proc, err = localrun.Start(id, filepath.Join(d.dir, bin), append(args, "-set", "http.addr="+p.http), nil, filepath.Join(d.dir, id+".log"))
	return p, err
}

// stop ends the workers (SIGTERM: they finish or release what they run),
// then the schedulers (they resign their shards), the HTTP target, etcd
// and Redis, and waits for each.
func (d *demo) stop() {
	for _, w := range d.workers {
		w.Stop(15 * time.Second)
	}
	for _, s := range d.scheds {
		s.Stop(10 * time.Second)
	}
	if d.target != nil {
		d.target.close()
	}
	if d.rdb != nil {
		d.rdb.Close()
	}
	if d.etcd != nil {
		d.etcd.Stop(5 * time.Second)
	}
	if d.redis != nil {
		d.redis.Stop(5 * time.Second)
	}
}

func produce(ctx context.Context, cli *client.Client, o options, n *atomic.Int64, out io.Writer) {
	const tick = 20 * time.Millisecond
	per := float64(o.rate) * tick.Seconds()
	t := time.NewTicker(tick)
	defer t.Stop()
	owed := 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		owed += per
		batch := make([]client.Task, 0, int(owed))
		for ; owed >= 1; owed-- {
			batch = append(batch, client.Task{
				Queue:   queue,
				Payload: demoPayload(),
				Delay:   time.Duration(rand.Int64N(int64(o.maxDelay) + 1)),
			})
		}
		res, err := cli.EnqueueBatch(ctx, batch)
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(out, "enqueue:", err)
		}
		for _, r := range res {
			if r.Err == nil {
				n.Add(1)
			}
		}
	}
}

type statusLine struct {
	enqueued, scheduled, ready      int64
	delivered, retried, dead, acked float64
	deliveredPerSec                 float64
	p50, p99                        float64
	owners                          map[string]int
	err                             error // the counts or a worker's metrics could not be read
}

func (s statusLine) String() string {
	if s.err != nil {
		return "status: " + s.err.Error()
	}
	return fmt.Sprintf("enqueued %d | due later %d | ready %d | delivered %.0f (%.0f/s) | acked %.0f | retried %.0f | dead %.0f | lateness p50 %.1fms p99 %.1fms | owners %s",
		s.enqueued, s.scheduled, s.ready, s.delivered, s.deliveredPerSec, s.acked, s.retried, s.dead, 1000*s.p50, 1000*s.p99, formatOwners(s.owners))
}

func (d *demo) status(enqueued int64, prev statusLine) statusLine {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := statusLine{enqueued: enqueued, owners: d.owners()}
	// Every shard of the layout's span, as it is now: `hourglass shards
	// resize` may have changed the count since the start.
	if q, err := d.in.Queue(ctx, queue); err == nil {
		st.scheduled, st.ready = q.Counts.Scheduled, q.Counts.Ready
	} else {
		st.err = fmt.Errorf("queue counts: %w", err)
	}
	var h promread.Histogram
	for _, w := range d.workers {
		fams, err := promread.Families(ctx, "http://"+w.http+"/metrics")
		if err != nil {
			continue // a worker not up yet, or stopping
		}
		err = h.Add(fams, "hourglass_worker_lateness_seconds")
		for _, c := range []struct {
			v    *float64
			name string
		}{
			{&st.delivered, "hourglass_worker_deliveries_total"}, {&st.acked, "hourglass_worker_acks_total"},
			{&st.retried, "hourglass_worker_retries_total"}, {&st.dead, "hourglass_worker_dead_total"},
		} {
			n, cerr := promread.Counter(fams, c.name)
			*c.v += n
			err = errors.Join(err, cerr)
		}
		if err != nil {
			st.err = fmt.Errorf("metrics: %w", err)
		}
	}
	st.p50, st.p99 = h.Quantile(0.5), h.Quantile(0.99)
	st.deliveredPerSec = st.delivered - prev.delivered
	return st
}

// owners asks every scheduler how many shards it owns.
func (d *demo) owners() map[string]int {
	out := map[string]int{}
	for _, s := range d.scheds {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := scheduler.FetchStatus(ctx, s.http)
		cancel()
		if err == nil {
			out[s.id] = len(st.Shards)
		}
	}
	return out
}

func formatOwners(m map[string]int) string {
	var parts []string
	for id, n := range m {
		parts = append(parts, fmt.Sprintf("%s:%d", id, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func moduleRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run hourglass-demo from inside the Hourglass repository")
	}
	return filepath.Dir(mod), nil
}
