package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/election"
	"github.com/hourglass-sched/hourglass/internal/promread"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// replicaConfig returns the default configuration of replica id on a
// fresh Redis and etcd (both returned), with a 2 s lease and HTTP on a
// free port.
func replicaConfig(t *testing.T, id string) (config.Config, *shardtest.Env, *testenv.Etcd) {
	cfg := config.Default()
	r := shardtest.New(t, shardtest.Options{Namespace: cfg.Namespace, Shards: cfg.Shards, NoQueues: true})
	e := testenv.StartEtcd(t)
	cfg.Redis.Addr = r.Redis.Addr
	cfg.Etcd.Endpoints = []string{e.Endpoint}
	cfg.Scheduler.ReplicaID = id
	cfg.Scheduler.LeaseTTL = 2 * time.Second
	cfg.HTTP.Addr = "127.0.0.1:0"
	return cfg, r, e
}

// runReplica runs a replica of cfg in-process until the test ends, and
// returns it with the buffer its Info log goes to; adjust, when given,
// changes the replica before it runs.
func runReplica(t *testing.T, cfg config.Config, adjust ...func(*Scheduler)) (*Scheduler, *testenv.Buffer) {
	t.Helper()
	logs := &testenv.Buffer{}
	s, err := New(&cfg, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range adjust {
		f(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		s.Close()
	})
	return s, logs
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: 2 * time.Second}
	resp, err := hc.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestReplicaEndpointsAndShutdown runs one replica in-process: it owns all
// shards, moves a task, reports through its endpoints, turns unready when
// Redis dies, and on shutdown frees its shards in etcd and leaks nothing.
func TestReplicaEndpointsAndShutdown(t *testing.T) {
	t.Parallel()
	cfg, r, e := replicaConfig(t, "inproc")
	logs := &testenv.Buffer{}
	s, err := New(&cfg, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.listener.Addr().String()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	if code, body := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	testenv.WaitFor(t, 15*time.Second, "ready and owning all shards", func() (bool, string) {
		code, _ := get(t, base+"/readyz")
		st := s.Status()
		return code == 200 && len(st.Shards) == cfg.Shards, st.Replica
	})
	// Each acquisition is logged once at Info (it used to be twice: by
	// the election and by the scheduler).
	if n := strings.Count(logs.String(), "acquired shard"); n != cfg.Shards || strings.Contains(logs.String(), "shard acquired") {
		t.Errorf("%d Info lines for %d shard acquisitions:\n%s", n+strings.Count(logs.String(), "shard acquired"), cfg.Shards, logs.String())
	}
	_, body := get(t, base+"/v1/status")
	if !strings.Contains(body, `"replica":"inproc"`) || !strings.Contains(body, `"epoch":`) {
		t.Fatalf("/v1/status = %s", body)
	}
	// The dashboard's shard table names the owners: the replica's
	// Inspector reads them from etcd (inspect/etcdowners).
	if code, body := get(t, base+"/ui/api/shards"); code != 200 || strings.Count(body, `"owner":"inproc"`) != cfg.Shards {
		t.Errorf("/ui/api/shards = %d %s, want every shard owned by inproc", code, body)
	}
	st, err := FetchStatus(ctx, strings.TrimPrefix(base, "http://"))
	if err != nil || st.Replica != "inproc" || !st.Ready || len(st.Shards) != cfg.Shards || st.Shards[0].Epoch <= 0 {
		t.Fatalf("FetchStatus = %+v, %v", st, err)
	}

	// Every owned shard's series exist from the start, at zero.
	fams0, err := promread.Families(ctx, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hourglass_moved_total", "hourglass_move_buried_total", "hourglass_far_promoted_total", "hourglass_scan_errors_total", "hourglass_stale_epoch_rejections_total"} {
		if f := fams0[name]; f == nil || len(f.Metric) != cfg.Shards {
			t.Errorf("%s: %v series before any event, want one per shard (%d)", name, f, cfg.Shards)
		}
	}

	// The replica registered the configured queue "default"; one task
	// through it shows in the mover's figures.
	r.Schedule("default", 0, "x")
	testenv.WaitFor(t, 5*time.Second, "task moved", func() (bool, string) {
		s := r.State("x")
		return s == "ready", s
	})
	fams, err := promread.Families(ctx, base+"/metrics")
	if err != nil {
		t.Fatal(err)
	}
	owned, err := promread.Counter(fams, "hourglass_shards_owned")
	if err != nil || owned != float64(cfg.Shards) {
		t.Errorf("hourglass_shards_owned = %v (%v), want %d", owned, err, cfg.Shards)
	}
	moved, err := promread.Counter(fams, "hourglass_moved_total")
	if err != nil || moved != 1 {
		t.Errorf("hourglass_moved_total = %v (%v), want 1", moved, err)
	}
	var late, scans promread.Histogram
	if err := late.Add(fams, "hourglass_move_lateness_seconds"); err != nil || late.Count != 1 {
		t.Errorf("hourglass_move_lateness_seconds counted %d moves (%v), want 1", late.Count, err)
	}
	// Every owned shard was scanned at least once when it was acquired.
	if err := scans.Add(fams, "hourglass_scan_duration_seconds"); err != nil || scans.Count < uint64(cfg.Shards) {
		t.Errorf("hourglass_scan_duration_seconds counted %d scans (%v), want at least %d", scans.Count, err, cfg.Shards)
	}

	// Operations on stored tasks are tallied in Redis and exported by
	// every scheduler: the cancel of x counts once.
	if _, err := r.Store.Cancel(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if fams, err = promread.Families(ctx, base+"/metrics"); err != nil {
		t.Fatal(err)
	}
	ops := map[string]float64{}
	for _, m := range fams["hourglass_task_operations_total"].GetMetric() {
		ops[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	if ops["cancel"] != 1 || ops["reschedule"] != 0 || len(ops) != len(shard.Operations) {
		t.Errorf("hourglass_task_operations_total = %v, want cancel 1 and every other op 0", ops)
	}

	r.Redis.Kill()
	testenv.WaitFor(t, 5*time.Second, "unready without Redis", func() (bool, string) {
		code, body := get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "redis"), body
	})

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	done <- nil // for the deferred receive
	resp, err := e.Client(t).Get(context.Background(), "/hourglass/shards/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("shard keys left after shutdown: %v %v", resp.Count, err)
	}
}

// TestReplicaIDFor: the id a replica takes when none is configured
// satisfies the election's rule whatever the host name.
func TestReplicaIDFor(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, want string
	}{
		{"node-1.example.com", "node-1.example.com-42"},
		{"", "-42"},
		{"häst:with spaces/and*stars", "h-st-with-spaces-and-stars-42"},
		{strings.Repeat("a", 100), strings.Repeat("a", 61) + "-42"},
		// A long name is cut at its start: pod names end in their
		// unique part.
		{"hourglass-scheduler-production-europe-west-4-deployment-7d9f8b6c5d-x2k9p", "cheduler-production-europe-west-4-deployment-7d9f8b6c5d-x2k9p-42"},
	} {
		got := replicaIDFor(c.host, 42)
		if got != c.want || !election.ValidReplicaID(got) {
			t.Errorf("replicaIDFor(%q) = %q (valid %v), want %q", c.host, got, election.ValidReplicaID(got), c.want)
		}
	}
}

// TestHealthTellsTheTruthEarly: a replica started while Redis does not
// answer serves /healthz at once and says on /readyz why it is not ready;
// once it is ready, /readyz answers 503 within about its 1 s budget when
// Redis stops answering (SIGSTOP), not after go-redis's own timeouts.
func TestHealthTellsTheTruthEarly(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "early")
	s, err := New(&cfg, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := "http://" + s.listener.Addr().String()

	r.Redis.Pause()
	paused := true
	defer func() {
		if paused {
			r.Redis.Resume()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	testenv.WaitFor(t, 5*time.Second, "/healthz served while Redis does not answer", func() (bool, string) {
		code, body := get(t, base+"/healthz")
		return code == 200, body
	})
	t.Logf("/healthz answered %v after start, Redis paused", time.Since(start).Round(time.Millisecond))
	testenv.WaitFor(t, 10*time.Second, "/readyz says why", func() (bool, string) {
		code, body := get(t, base+"/readyz")
		return code == 503 && strings.Contains(body, "registering queues failed"), body
	})
	t.Logf("/readyz said why %v after start", time.Since(start).Round(time.Millisecond))
	r.Redis.Resume()
	paused = false
	testenv.WaitFor(t, 20*time.Second, "ready once Redis answers", func() (bool, string) {
		code, body := get(t, base+"/readyz")
		return code == 200, body
	})

	r.Redis.Pause()
	paused = true
	asked := time.Now()
	code, body := get(t, base+"/readyz")
	took := time.Since(asked)
	t.Logf("/readyz answered %d in %v with Redis paused", code, took.Round(time.Millisecond))
	if code != 503 || !strings.Contains(body, "redis") || took > 2500*time.Millisecond {
		t.Errorf("/readyz with Redis paused: %d %q after %v; want 503 about redis within its 1 s budget", code, body, took)
	}
	// Resume before the replica shuts down: calls in flight to a paused
	// Redis end only with their own timeouts.
	r.Redis.Resume()
	paused = false
}

// TestRegistryComesBackAfterRedisLosesData: Redis flushed (as after a
// restart without persistence) loses the queue registry; the running
// replica notices within registryCheck (the test shortens it) and registers its queues again,
// so producers stop getting "unknown queue" without a scheduler restart.
func TestRegistryComesBackAfterRedisLosesData(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "registry")
	const every = 200 * time.Millisecond
	_, logs := runReplica(t, cfg, func(s *Scheduler) { s.registryEvery = every })
	cli, err := client.New(r.RDB, client.Config{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	tctx := testenv.Ctx(t, 30*time.Second)
	testenv.WaitFor(t, 15*time.Second, "queue default registered", func() (bool, string) {
		_, err := cli.Enqueue(tctx, client.Task{Queue: "default", Delay: time.Hour})
		return err == nil, fmt.Sprint(err)
	})
	if err := r.RDB.FlushAll(tctx).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "queue default registered again", func() (bool, string) {
		_, err := cli.Enqueue(tctx, client.Task{Queue: "default", Delay: time.Hour})
		return err == nil, fmt.Sprint(err)
	})
	if !strings.Contains(logs.String(), "Redis lost the queue registry") {
		t.Errorf("the re-registration was not logged:\n%s", logs.String())
	}
}

// TestEtcdTLSFailureIsNamed: a replica whose etcd requires a client
// certificate it does not present says so at start, with the TLS cause,
// instead of only "context deadline exceeded" from every etcd call.
func TestEtcdTLSFailureIsNamed(t *testing.T) {
	t.Parallel()
	pki := testenv.NewPKI(t)
	e := testenv.StartEtcd(t, testenv.WithEtcdTLS(pki.CA, pki.ServerCert, pki.ServerKey))
	cfg, _, _ := replicaConfig(t, "tls")
	cfg.Etcd.Endpoints = []string{e.Endpoint}
	cfg.Etcd.TLS = config.TLSConfig{Enabled: true, CAFile: pki.CA} // no client certificate
	_, logs := runReplica(t, cfg)
	testenv.WaitFor(t, 10*time.Second, "the TLS failure logged", func() (bool, string) {
		l := logs.String()
		return strings.Contains(l, "etcd TLS check failed") && strings.Contains(l, "certificate"), l
	})
}

// TestSchedulesFromConfigAndRegistry: a replica fires a configured
// schedule and one registered at run time (inspect.SetSchedule, heard
// through the control channel: the periodic re-read is an hour here);
// a registered schedule removed stops firing. The dashboard lists the
// schedules fired at each point.
func TestSchedulesFromConfigAndRegistry(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "periodic")
	cfg.Periodic = map[string]config.PeriodicConfig{"conf": {Queue: "default", Interval: time.Second}}
	s, _ := runReplica(t, cfg, func(s *Scheduler) { s.registryEvery = time.Hour })
	shown := func() string {
		t.Helper()
		code, body := get(t, "http://"+s.listener.Addr().String()+"/ui/api/schedules")
		var got struct{ Schedules []inspect.ScheduleInfo }
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("dashboard schedules: %d %s", code, body)
		}
		var names []string
		for _, si := range got.Schedules {
			names = append(names, si.Name)
		}
		return strings.Join(names, ",")
	}
	if got := shown(); got != "conf" {
		t.Fatalf("dashboard shows %q at start, want conf", got)
	}
	in, err := inspect.New(r.RDB, inspect.Config{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, time.Minute)
	l := r.Layout()
	last := func(name string) time.Time {
		m, err := r.Store.LastRecorded(ctx, l.HomeShard(name))
		if err != nil {
			t.Fatal(err)
		}
		return m[name]
	}
	testenv.WaitFor(t, 20*time.Second, "the configured schedule fired", func() (bool, string) {
		return !last("conf").IsZero(), "not yet"
	})
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "reg", Queue: "default", Interval: time.Second}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the registered schedule fired", func() (bool, string) {
		return !last("reg").IsZero(), "not yet"
	})
	if got := shown(); got != "conf,reg" {
		t.Fatalf("dashboard shows %q, want conf,reg", got)
	}
	if info, err := r.Store.Lookup(ctx, l.OccurrenceID("reg", last("reg"))); err != nil || info.State != "scheduled" && info.State != "ready" {
		t.Fatalf("the registered schedule's task: %+v %v", info, err)
	}
	// Changed to every 2 s: from the change on, only even seconds occur,
	// and no occurrence is fired twice (nothing consumes the tasks: each
	// occurrence fired is a task in the schedule's shard).
	changed := last("reg")
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "reg", Queue: "default", Interval: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 15*time.Second, "two occurrences of the changed schedule", func() (bool, string) {
		return last("reg").After(changed.Add(2 * time.Second)), fmt.Sprint(last("reg"))
	})
	ids, err := r.RDB.HKeys(ctx, l.Tasks(l.HomeShard("reg"))).Result()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		occ, ok := strings.CutPrefix(id, "reg@")
		if !ok {
			continue
		}
		occ, _, _ = strings.Cut(occ, "~")
		if seen[occ] {
			t.Fatalf("occurrence %s fired twice", occ)
		}
		seen[occ] = true
		ms, _ := strconv.ParseInt(occ, 10, 64)
		if ms > changed.UnixMilli()+2000 && ms%2000 != 0 {
			t.Fatalf("occurrence %s after the change to 2 s is not on an even second", occ)
		}
	}
	if err := in.RemoveSchedule(ctx, "reg"); err != nil {
		t.Fatal(err)
	}
	// Removed: its last occurrence stops advancing (two readings 1.5 s
	// apart agree; with the schedule firing every second they cannot).
	testenv.WaitFor(t, 10*time.Second, "the removed schedule stopped", func() (bool, string) {
		before := last("reg")
		<-time.After(1500 * time.Millisecond) // timed phase: an interval and a half without a firing
		after := last("reg")
		return after.Equal(before), fmt.Sprintf("%v then %v", before, after)
	})
	if got := shown(); got != "conf" {
		t.Fatalf("dashboard shows %q after the removal, want conf", got)
	}
	if err := in.RemoveSchedule(ctx, "reg"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("removing it again: %v", err)
	}
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "bad", Queue: "nope", Interval: time.Second}); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("a schedule on an unknown queue: %v", err)
	}
	if err := in.SetSchedule(ctx, periodic.Schedule{Name: "bad", Queue: "default", Cron: "61 * * * *"}); !errors.Is(err, inspect.ErrInvalidArgument) || !strings.Contains(err.Error(), "cron") {
		t.Fatalf("an invalid schedule: %v", err)
	}
	confLast := last("conf")
	testenv.WaitFor(t, 10*time.Second, "the configured schedule still firing", func() (bool, string) {
		return last("conf").After(confLast), fmt.Sprint(last("conf"))
	})
}

// TestTaskEncodingFromConfig: scheduler.task_encoding reaches the
// registration. A replica set to 1 keeps a new namespace on version 1
// (auto would choose 2 there), so a task enqueued once it registered is
// stored as text.
func TestTaskEncodingFromConfig(t *testing.T) {
	t.Parallel()
	cfg, r, _ := replicaConfig(t, "encoding")
	cfg.Scheduler.TaskEncoding = "1"
	runReplica(t, cfg)
	cli, err := client.New(r.RDB, client.Config{Namespace: cfg.Namespace, Shards: cfg.Shards})
	if err != nil {
		t.Fatal(err)
	}
	tctx := testenv.Ctx(t, 30*time.Second)
	var id string
	testenv.WaitFor(t, 15*time.Second, "queue default registered", func() (bool, string) {
		res, err := cli.Enqueue(tctx, client.Task{Queue: "default", Delay: time.Hour})
		id = res.ID
		return err == nil, fmt.Sprint(err)
	})
	l := r.Layout()
	blob := r.RDB.HGet(tctx, l.Tasks(l.ShardOf(id)), id).Val()
	if !strings.HasPrefix(blob, "1|default|") {
		t.Fatalf("task stored as %q, want encoding version 1", blob)
	}
	if enc := r.RDB.HGet(tctx, l.Queues(0), "|encoding").Val(); enc != "1" {
		t.Fatalf("namespace encoding %q, want 1", enc)
	}
}
