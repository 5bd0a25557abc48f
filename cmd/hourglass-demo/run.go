package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
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
	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

const queue = "default"

// demo holds what run started; stop tears it down in reverse order.
type demo struct {
	out    io.Writer
	dir    string
	redis  *localrun.Redis
	etcd   *localrun.Etcd
	scheds []*scheduler
	rdb    *redis.Client
	layout shard.Layout
}

type scheduler struct {
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
	fmt.Fprintf(out, "hourglass-demo: starting Redis, etcd and %d schedulers in %s\n", o.schedulers, dir)
	if err := d.start(ctx, o); err != nil {
		return err
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
	if d.layout, err = shard.NewLayout("hourglass", o.shards); err != nil {
		return err
	}
	bin := filepath.Join(d.dir, "scheduler")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/scheduler")
	build.Dir, err = moduleRoot()
	if err != nil {
		return err
	}
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build scheduler: %w\n%s", err, b)
	}
	for i := 1; i <= o.schedulers; i++ {
		port, err := localrun.FreePort()
		if err != nil {
			return err
		}
		s := &scheduler{id: fmt.Sprintf("demo-%d", i), http: fmt.Sprintf("127.0.0.1:%d", port)}
		s.Proc, err = localrun.Start(s.id, bin, []string{
			"-set", "redis.addr=" + d.redis.Addr,
			"-set", "etcd.endpoints=" + d.etcd.Endpoint,
			"-set", "scheduler.replica_id=" + s.id,
			"-set", fmt.Sprintf("shards=%d", o.shards),
			"-set", "http.addr=" + s.http,
		}, nil, filepath.Join(d.dir, s.id+".log"))
		if err != nil {
			return err
		}
		d.scheds = append(d.scheds, s)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		owners := d.owners()
		n := 0
		for _, c := range owners {
			n += c
		}
		if n == o.shards {
			fmt.Fprintf(d.out, "hourglass-demo: all %d shards owned: %s; enqueueing %d tasks/s with delays 0-%s\n", o.shards, formatOwners(owners), o.rate, o.maxDelay)
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

// stop ends the schedulers (SIGTERM: they resign their shards), then etcd
// and Redis, and waits for each.
func (d *demo) stop() {
	for _, s := range d.scheds {
		s.Stop(10 * time.Second)
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
				Payload: []byte(`{"demo":true}`),
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
	enqueued, scheduled, ready int64
	moved                      float64
	movedPerSec                float64
	p50, p99                   float64
	owners                     map[string]int
}

func (s statusLine) String() string {
	return fmt.Sprintf("enqueued %d | scheduled %d | ready %d | moved/s %.0f | move lateness p50 %.1fms p99 %.1fms | owners %s",
		s.enqueued, s.scheduled, s.ready, s.movedPerSec, 1000*s.p50, 1000*s.p99, formatOwners(s.owners))
}

func (d *demo) status(enqueued int64, prev statusLine) statusLine {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := statusLine{enqueued: enqueued, owners: d.owners()}
	pipe := d.rdb.Pipeline()
	var zc, ll []*redis.IntCmd
	for sh := 0; sh < d.layout.Shards(); sh++ {
		zc = append(zc, pipe.ZCard(ctx, d.layout.Delayed(sh)))
		ll = append(ll, pipe.LLen(ctx, d.layout.Ready(sh, queue)))
	}
	_, _ = pipe.Exec(ctx)
	for i := range zc {
		st.scheduled += zc[i].Val()
		st.ready += ll[i].Val()
	}
	var h promread.Histogram
	for _, s := range d.scheds {
		if fams, err := promread.Families(ctx, "http://"+s.http+"/metrics"); err == nil {
			h.Add(fams, "hourglass_move_lateness_seconds")
			st.moved += promread.Counter(fams, "hourglass_moved_total")
		}
	}
	st.p50, st.p99 = h.Quantile(0.5), h.Quantile(0.99)
	st.movedPerSec = st.moved - prev.moved
	return st
}

// owners asks every scheduler how many shards it owns.
func (d *demo) owners() map[string]int {
	out := map[string]int{}
	hc := http.Client{Timeout: time.Second}
	for _, s := range d.scheds {
		resp, err := hc.Get("http://" + s.http + "/v1/status")
		if err != nil {
			continue
		}
		var st struct{ Shards []json.RawMessage }
		if json.NewDecoder(resp.Body).Decode(&st) == nil {
			out[s.id] = len(st.Shards)
		}
		resp.Body.Close()
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
