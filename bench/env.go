package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/connect"
	"github.com/hourglass-sched/hourglass/internal/localrun"
	"github.com/hourglass-sched/hourglass/internal/scheduler"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

const (
	nShards   = 16 // the default deployment of every scenario
	hgQueue   = "default"
	namespace = "hourglass"
)

// env is everything the benchmark started: one Redis and etcd for
// Hourglass with its scheduler processes, and a second Redis (same
// binary, same flags) for asynq, so neither system sees the other's keys
// or load. stop tears all of it down.
//
// A cluster env (startClusterEnv, the cluster scenario) runs Hourglass on
// a Redis Cluster instead: nodes holds its primaries and hgRed is nil.
type env struct {
	dir    string
	root   string // the Hourglass repository
	hgRed  *localrun.Redis
	aqRed  *localrun.Redis
	etcd   *localrun.Etcd
	scheds []*sched

	hgAdmin  redis.UniversalClient // measurement only; its commands are subtracted
	aqAdmin  *redis.Client         // measurement only; its commands are subtracted
	hgAdminN *cmdCounter
	aqAdminN *cmdCounter
	layout   shard.Layout
	shards   int
	ttl      time.Duration

	// nodes are the primaries of a cluster env, each with a plain client
	// (INFO per node; its commands are subtracted) and the spread of the
	// shards over them.
	nodes  []*clusterNode
	spread shardSpread

	// schedArgs are added to every scheduler's arguments (the periodic
	// scenario's schedules).
	schedArgs []string
	// prefetch is the schedulers' scheduler.prefetch; 0 passes nothing,
	// so they run the default (tasks move when due). Only the tuned row
	// of the steady scenario sets it.
	prefetch time.Duration

	// bqRed is BullMQ's redis-server (same binary and flags), with its
	// measuring client; nil when BullMQ does not run.
	bqRed    *localrun.Redis
	bqAdmin  *redis.Client
	bqAdminN *cmdCounter
}

// envOpts says what startEnv starts besides Hourglass's Redis, etcd and
// schedulers.
type envOpts struct {
	shards        int
	asynq, bullmq bool          // a redis-server of its own for each peer
	prefetch      time.Duration // scheduler.prefetch; 0 = the default
}

// sched is one scheduler process and its HTTP address.
type sched struct {
	*localrun.Proc
	id   string
	http string
}

func repoRoot() (string, error) {
	b, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(b))
	if !strings.HasSuffix(mod, filepath.Join("bench", "go.mod")) {
		return "", errors.New("run the benchmark from the bench/ directory (make bench)")
	}
	return filepath.Dir(filepath.Dir(mod)), nil
}

// startEnv starts Redis, etcd and two schedulers running o.shards shards,
// and a Redis of its own for each peer that runs.
func startEnv(ctx context.Context, logf func(string, ...any), o envOpts) (*env, error) {
	e, err := newEnv(ctx, logf, o.shards)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			e.stop()
		}
	}()
	// localrun passes --save "" --appendonly no: no persistence.
	if e.hgRed, err = localrun.StartRedis(e.dir); err != nil {
		return nil, err
	}
	e.prefetch = o.prefetch
	if o.asynq {
		if e.aqRed, err = localrun.StartRedis(e.dir); err != nil {
			return nil, err
		}
		e.aqAdmin = redis.NewClient(&redis.Options{Addr: e.aqRed.Addr})
		e.aqAdmin.AddHook(e.aqAdminN)
	}
	if o.bullmq {
		if e.bqRed, err = localrun.StartRedis(e.dir); err != nil {
			return nil, err
		}
		e.bqAdmin = redis.NewClient(&redis.Options{Addr: e.bqRed.Addr})
		e.bqAdmin.AddHook(e.bqAdminN)
	}
	e.hgAdmin = e.dial(e.hgAdminN)
	if err := e.startSchedulers(ctx); err != nil {
		return nil, err
	}
	ok = true
	return e, nil
}

// newEnv makes the env's directory and builds the binaries into it; the
// caller starts Redis, then calls startSchedulers.
func newEnv(ctx context.Context, logf func(string, ...any), shards int) (*env, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "hourglass-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, root: root, ttl: 5 * time.Second, shards: shards, hgAdminN: newCmdCounter(), aqAdminN: newCmdCounter(), bqAdminN: newCmdCounter()}
	if e.layout, err = shard.NewLayout(namespace, shards); err != nil {
		e.stop()
		return nil, err
	}
	logf("building cmd/scheduler and cmd/worker into %s", dir)
	build := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/scheduler", "./cmd/worker")
	build.Dir = root
	if b, err := build.CombinedOutput(); err != nil {
		e.stop()
		return nil, fmt.Errorf("build binaries: %w\n%s", err, b)
	}
	return e, nil
}

// startSchedulers starts etcd and two schedulers on the env's Redis and
// waits until they settled.
func (e *env) startSchedulers(ctx context.Context) error {
	var err error
	if e.etcd, err = localrun.StartEtcd(e.dir); err != nil {
		return err
	}
	for i := 1; i <= 2; i++ {
		if _, err := e.startSched(fmt.Sprintf("scheduler-%d", i)); err != nil {
			return err
		}
	}
	return e.waitSettled(ctx, 30*time.Second)
}

// dial returns a new client of Hourglass's Redis, counting its commands
// in hook (if not nil): a plain client, or on a cluster env a cluster
// client that re-reads the slot map as often as the binaries' do. Both
// keep go-redis's other defaults.
func (e *env) dial(hook *cmdCounter) redis.UniversalClient {
	var c redis.UniversalClient
	if len(e.nodes) == 0 {
		c = redis.NewClient(&redis.Options{Addr: e.hgRed.Addr})
	} else {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.nodeAddrs(), ClusterStateReloadInterval: connect.ClusterStateReload})
	}
	if hook != nil {
		c.AddHook(hook)
	}
	return c
}

// redisArgs are the binaries' Redis settings.
func (e *env) redisArgs() []string {
	if len(e.nodes) == 0 {
		return []string{"-set", "redis.addr=" + e.hgRed.Addr}
	}
	return []string{"-set", "redis.mode=cluster", "-set", "redis.addr=", "-set", "redis.addrs=" + strings.Join(e.nodeAddrs(), ",")}
}

func (e *env) startSched(id string) (*sched, error) {
	port, err := localrun.FreePort()
	if err != nil {
		return nil, err
	}
	s := &sched{id: id, http: fmt.Sprintf("127.0.0.1:%d", port)}
	args := append(e.redisArgs(),
		"-set", "etcd.endpoints="+e.etcd.Endpoint,
		"-set", fmt.Sprintf("shards=%d", e.shards),
		"-set", "namespace="+namespace,
		"-set", "scheduler.replica_id="+id,
		"-set", "scheduler.lease_ttl="+e.ttl.String(),
		"-set", "http.addr="+s.http,
	)
	if e.prefetch > 0 {
		args = append(args, "-set", "scheduler.prefetch="+e.prefetch.String())
	}
	args = append(args, e.schedArgs...)
	s.Proc, err = localrun.Start(id, filepath.Join(e.dir, "scheduler"), args, nil, filepath.Join(e.dir, id+".log"))
	if err != nil {
		return nil, err
	}
	e.scheds = append(e.scheds, s)
	return s, nil
}

// status fetches a scheduler's GET /v1/status.
func (s *sched) status() (scheduler.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return scheduler.FetchStatus(ctx, s.http)
}

// owners maps each shard to the running scheduler that owns it and the
// epoch it reports.
func (e *env) owners() (map[int]*sched, map[int]int64) {
	own, ep := map[int]*sched{}, map[int]int64{}
	for _, s := range e.scheds {
		if !s.Running() {
			continue
		}
		st, err := s.status()
		if err != nil {
			continue
		}
		for _, sh := range st.Shards {
			own[sh.Shard], ep[sh.Shard] = s, sh.Epoch
		}
	}
	return own, ep
}

// waitSettled waits until every shard is owned by a running scheduler,
// ownership is balanced, and each owner's mover has stored its epoch in
// Redis.
func (e *env) waitSettled(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	running := 0
	for _, s := range e.scheds {
		if s.Running() {
			running++
		}
	}
	var why string
	for time.Now().Before(deadline) {
		own, ep := e.owners()
		why = fmt.Sprintf("%d of %d shards owned", len(own), e.shards)
		if len(own) == e.shards {
			count := map[*sched]int{}
			good := true
			for sh, s := range own {
				count[s]++
				if got, _ := e.storedEpoch(ctx, sh); got != ep[sh] {
					good, why = false, fmt.Sprintf("shard %d mover not run yet", sh)
				}
			}
			lo, hi := e.shards/running, (e.shards+running-1)/running
			for _, c := range count {
				if c < lo || c > hi {
					good, why = false, "unbalanced"
				}
			}
			if good && len(count) == running {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("schedulers not settled after %s: %s", timeout, why)
}

func (e *env) storedEpoch(ctx context.Context, sh int) (int64, error) {
	n, err := e.hgAdmin.Get(ctx, e.layout.Epoch(sh)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// clearHG deletes every scheduled/ready/leased task of Hourglass but keeps
// queue registrations and epochs, so the running schedulers carry on. One
// DEL per shard, all in one pipeline: a shard's keys share a hash slot, so
// this works on a cluster too.
func (e *env) clearHG(ctx context.Context) error {
	pipe := e.hgAdmin.Pipeline()
	for sh := 0; sh < e.shards; sh++ {
		keys := []string{e.layout.Delayed(sh), e.layout.Tasks(sh), e.layout.Ready(sh, hgQueue),
			e.layout.Pending(sh, hgQueue), e.layout.Inflight(sh), e.layout.Leases(sh), e.layout.Errors(sh),
			e.layout.Dead(sh), e.layout.DeadInfo(sh), e.layout.Far(sh),
			// Records of ended tasks (the cancel and results scenarios).
			e.layout.Ended(sh), e.layout.EndedIndex(sh, hgQueue), e.layout.EndedIndex(sh, resultsQueue)}
		buckets, err := e.hgAdmin.ZRange(ctx, e.layout.Far(sh), 0, -1).Result()
		if err != nil {
			return err
		}
		for _, b := range buckets {
			keys = append(keys, e.layout.FarBucket(sh, b))
		}
		pipe.Del(ctx, keys...)
	}
	_, err := pipe.Exec(ctx)
	return err
}

func (e *env) stop() {
	for _, s := range e.scheds {
		s.Stop(10 * time.Second)
	}
	if e.hgAdmin != nil {
		e.hgAdmin.Close()
	}
	if e.aqAdmin != nil {
		e.aqAdmin.Close()
	}
	if e.etcd != nil {
		e.etcd.Stop(5 * time.Second)
	}
	if e.hgRed != nil {
		e.hgRed.Stop(5 * time.Second)
	}
	for _, n := range e.nodes {
		n.admin.Close()
		n.Stop(5 * time.Second)
	}
	if e.aqRed != nil {
		e.aqRed.Stop(5 * time.Second)
	}
	if e.bqAdmin != nil {
		e.bqAdmin.Close()
	}
	if e.bqRed != nil {
		e.bqRed.Stop(5 * time.Second)
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}
