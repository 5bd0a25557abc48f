package e2e_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/inspect/etcdowners"
	"github.com/hourglass-sched/hourglass/internal/dashboard"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

// TestLeastPrivilegeACLs runs the whole flow with each component
// connected to Redis as its own ACL user, with exactly the rules of
// shard.ACLUsers (what docs/operations.md shows): the scheduler binary
// (moving, retries, periodic firing, recovery, dead-letter retention,
// the dashboard's reads and changes, and a change of the shard count
// with tasks to move), the worker binary (pop, claim, lease extension,
// ack, nack to a retry and to the dead-letter queue, a cluster-wide
// concurrency and rate limit, pauses), a producer (the Go client: batch
// and single enqueue, the far tier, exists, lookup, cancel, the
// durability mode's WAIT, an enqueue redirected by the new layout) and
// the admin API (inspect: depths, listings, lookup, cancel, replay and
// purge one and in bulk, pause and resume of queues and schedules, the
// queue and schedule registries, the layout and its resize). Redis
// refused nothing: its ACL LOG is empty at the end, and every user was
// connected.
func TestLeastPrivilegeACLs(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	ctx := testenv.Ctx(t, 4*time.Minute)
	const ns = "hourglass"
	for _, u := range shard.ACLUsers(ns) {
		args := []any{"ACL", "SETUSER", "hourglass-" + u.Component, "reset", "on", ">pw-" + u.Component}
		for _, r := range u.Rules() {
			args = append(args, r)
		}
		if err := c.rdb.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("ACL SETUSER for the %s: %v", u.Component, err)
		}
	}
	if err := c.rdb.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	refused := func() []any {
		entries, err := c.rdb.Do(ctx, "ACL", "LOG").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, e := range refused() {
				t.Logf("Redis refused: %v", e)
			}
		}
	})
	as := func(component string) redis.UniversalClient {
		r := redis.NewClient(&redis.Options{Addr: c.redis.Addr, Username: "hourglass-" + component, Password: "pw-" + component})
		t.Cleanup(func() { r.Close() })
		return r
	}
	cred := func(component string) []string {
		return []string{"-set", "redis.username=hourglass-" + component, "-set", "redis.password=pw-" + component}
	}

	tg := newTarget(t)
	tg.setBehave(func(w http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		switch {
		case strings.HasPrefix(id, "bad-"):
			http.Error(w, "partner down", http.StatusBadGateway)
			return true
		case strings.HasPrefix(id, "slow-"):
			time.Sleep(2500 * time.Millisecond) // beyond the 2 s lease: the watchdog extends it
		}
		return false
	})
	queues := []string{
		"-set", "queues.default.http.url=" + tg.URL, "-set", "queues.default.timeout=2s", "-set", "queues.default.max_retries=1",
		"-set", "queues.default.backoff.base=100ms", "-set", "queues.default.lease_after=100ms",
		"-set", "queues.limited.http.url=" + tg.URL, "-set", "queues.limited.max_concurrency=2",
		"-set", "queues.limited.rate_limit.rate=50", "-set", "worker.shutdown_grace=2s",
		// The other limiters' keys are the worker's too.
		"-set", "queues.windowed.http.url=" + tg.URL, "-set", "queues.windowed.rate_limit.rate=50", "-set", "queues.windowed.rate_limit.kind=sliding_window",
		"-set", "queues.fixed.http.url=" + tg.URL, "-set", "queues.fixed.rate_limit.rate=50", "-set", "queues.fixed.rate_limit.kind=fixed_window",
		"-set", "queues.leaky.http.url=" + tg.URL, "-set", "queues.leaky.rate_limit.rate=50", "-set", "queues.leaky.rate_limit.kind=leaky_bucket",
		// A fair queue with caps per key that no worker consumes: the
		// admin's refills after a change of a key's weight or cap.
		"-set", "queues.tenants.fair=true", "-set", "queues.tenants.key_concurrency=1",
	}
	s := c.start("acl-s", append(append(cred("scheduler"), queues...),
		"-set", "periodic.tick.queue=default", "-set", "periodic.tick.interval=1s", "-set", "dlq.max_age=1h")...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("acl-s") })
	w := c.startWorker("acl-w", append(cred("worker"), queues...)...)
	for _, addr := range []string{s.http, w.http} {
		testenv.WaitFor(t, 20*time.Second, addr+" ready", func() (bool, string) {
			code, body := httpGet(addr + "/readyz")
			return code == 200, body
		})
	}

	// The producer.
	prod, err := client.New(as("producer"), client.Config{Shards: nShards})
	if err != nil {
		t.Fatal(err)
	}
	tasks := []client.Task{
		{ID: "bad-1", Queue: "default"}, {ID: "bad-2", Queue: "default"}, {ID: "slow-1", Queue: "default"},
		{ID: "later-1", Queue: "default", Delay: time.Hour}, {ID: "far-1", Queue: "default", Delay: 48 * time.Hour},
		{ID: "lim-1", Queue: "limited"}, {ID: "lim-2", Queue: "limited"}, {ID: "lim-3", Queue: "limited"},
		{ID: "win-1", Queue: "windowed"}, {ID: "fix-1", Queue: "fixed"}, {ID: "leak-1", Queue: "leaky"},
	}
	for i := range 20 {
		tasks = append(tasks, client.Task{ID: fmt.Sprintf("ok-%d", i), Queue: "default", Payload: []byte("x")},
			client.Task{ID: fmt.Sprintf("stay-%d", i), Queue: "default", Delay: time.Hour})
	}
	if _, err := prod.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := prod.Enqueue(ctx, client.Task{ID: "soon-1", Queue: "default", Delay: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if ok, err := prod.Exists(ctx, "later-1"); err != nil || !ok {
		t.Fatalf("exists: %v %v", ok, err)
	}
	if info, err := prod.Lookup(ctx, "later-1"); err != nil || info.State != client.StateScheduled {
		t.Fatalf("lookup: %+v %v", info, err)
	}
	if _, err := prod.Cancel(ctx, "later-1"); err != nil {
		t.Fatal(err)
	}
	durable, err := client.New(as("producer"), client.Config{Shards: nShards, WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := durable.Enqueue(ctx, client.Task{ID: "durable-1", Queue: "default"}); !errors.Is(err, client.ErrNotReplicated) {
		t.Fatalf("an enqueue that waits for a replica there is not: %v", err)
	}

	// The worker and the scheduler at work.
	admin, err := inspect.New(as("admin"), inspect.Config{Shards: nShards, Owners: etcdowners.New(c.ecli, "")})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "tasks delivered, the bad ones dead", func() (bool, string) {
		tg.mu.Lock()
		ok := tg.count["ok-19"] > 0 && tg.count["slow-1"] > 0 && tg.count["lim-3"] > 0 && tg.count["soon-1"] > 0 && tg.count["durable-1"] > 0 &&
			tg.count["win-1"] > 0 && tg.count["fix-1"] > 0 && tg.count["leak-1"] > 0
		tg.mu.Unlock()
		q, err := admin.Queue(ctx, "default")
		return ok && err == nil && q.Counts.Dead == 2, fmt.Sprintf("%+v %v", q.Counts, err)
	})

	// The admin API.
	tick, err := periodic.Schedule{Name: "tick", Queue: "default", Interval: time.Second}.Compile()
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"queues", func() error { _, _, err := admin.Queues(ctx); return err }},
		{"shards", func() error { _, err := admin.Shards(ctx); return err }},
		{"processes", func() error {
			// Listed: the scheduler and the worker wrote their entries and
			// named their connections under their own users.
			ps, err := admin.Processes(ctx)
			if err == nil && len(ps) != 2 {
				return fmt.Errorf("listed %+v, want the scheduler and the worker", ps)
			}
			return err
		}},
		{"list dead", func() error {
			_, err := admin.ListDead(ctx, inspect.DeadFilter{Reason: "max retries exhausted"}, "", 10)
			return err
		}},
		{"list scheduled", func() error {
			_, err := admin.ListTasks(ctx, inspect.ListOptions{State: inspect.StateScheduled})
			return err
		}},
		{"list ready", func() error {
			_, err := admin.ListTasks(ctx, inspect.ListOptions{State: inspect.StateReady, Queue: "default"})
			return err
		}},
		{"list active", func() error {
			_, err := admin.ListTasks(ctx, inspect.ListOptions{State: inspect.StateActive})
			return err
		}},
		{"lookup", func() error { _, err := admin.Task(ctx, "stay-1"); return err }},
		{"pause", func() error { return admin.Pause(ctx, "limited") }},
		{"resume", func() error { return admin.Resume(ctx, "limited") }},
		{"schedules", func() error { _, err := admin.Schedules(ctx, []*periodic.Compiled{tick}, time.Now(), 2); return err }},
		{"pause a schedule", func() error { return admin.PauseSchedule(ctx, "tick") }},
		{"resume a schedule", func() error { return admin.ResumeSchedule(ctx, "tick") }},
		{"register a schedule", func() error {
			return admin.SetSchedule(ctx, periodic.Schedule{Name: "hourly", Queue: "default", Cron: "@hourly"})
		}},
		{"registered schedules", func() error { _, err := admin.RegisteredSchedules(ctx); return err }},
		{"remove a schedule", func() error { return admin.RemoveSchedule(ctx, "hourly") }},
		{"set a queue", func() error {
			return admin.SetQueue(ctx, "extra", inspect.Policy{MaxRetries: hourglass.Retries(1), Timeout: time.Second, MaxPayload: 1024})
		}},
		{"remove a queue", func() error { return admin.RemoveQueue(ctx, "extra") }},
		{"replay", func() error { return admin.Replay(ctx, "bad-1", time.Time{}) }},
		{"cancel", func() error { _, err := admin.Cancel(ctx, "stay-0"); return err }},
		{"weigh a key", func() error { return admin.SetKeyWeight(ctx, "default", "tenant-1", 0) }},
		{"key weights", func() error { _, err := admin.KeyWeights(ctx, "default"); return err }},
		// A paused key's tasks wait; its weight back fills the empty
		// window (and announces it), then a raised cap adds one more.
		{"pause a key of a fair queue", func() error { return admin.SetKeyWeight(ctx, "tenants", "t1", 0) }},
		{"its tasks wait", func() error {
			if _, err := prod.EnqueueBatch(ctx, []client.Task{{Queue: "tenants", Key: "t1", ID: "a"}, {Queue: "tenants", Key: "t1", ID: "b"}}); err != nil {
				return err
			}
			var err error
			testenv.WaitFor(t, 20*time.Second, "t1's tasks moved", func() (bool, string) {
				var q inspect.Queue
				q, err = admin.Queue(ctx, "tenants")
				return err == nil && q.Counts.Scheduled == 0 && q.Counts.Ready == 2, fmt.Sprintf("%+v %v", q.Counts, err)
			})
			return err
		}},
		{"resume the key", func() error { return admin.SetKeyWeight(ctx, "tenants", "t1", 1) }},
		{"raise its cap", func() error { return admin.SetKeyConcurrency(ctx, "tenants", "t1", 2) }},
		{"key caps", func() error { _, err := admin.KeyConcurrency(ctx, "tenants"); return err }},
		{"a key's cap back to the default", func() error { return admin.ClearKeyConcurrency(ctx, "tenants", "t1") }},
	}
	for _, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("admin: %s: %v", st.what, err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "bad-1 dead again", func() (bool, string) {
		tk, err := admin.Task(ctx, "bad-1")
		return err == nil && tk.State == inspect.StateDead, fmt.Sprint(tk.State, err)
	})
	if err := admin.Purge(ctx, "bad-1"); err != nil {
		t.Fatal(err)
	}
	if p, err := admin.ReplayDead(ctx, inspect.DeadFilter{Queue: "nosuch"}, time.Time{}, nil); err != nil || p.Done != 0 {
		t.Fatalf("bulk replay: %+v %v", p, err)
	}
	if p, err := admin.PurgeDead(ctx, inspect.DeadFilter{Queue: "nosuch"}, nil); err != nil || p.Done != 0 {
		t.Fatalf("bulk purge: %+v %v", p, err)
	}

	// The dashboard, on the scheduler's connection.
	for _, path := range []string{"config", "queues", "dead", "shards", "schedules", "stats", "task?id=stay-2", "weights?queue=default", "processes"} {
		if code, body := httpGet(s.http + "/ui/api/" + path); code != 200 {
			t.Fatalf("dashboard %s: %d %s", path, code, body)
		}
	}
	for _, path := range []string{"queues/default/pause", "queues/default/resume", "schedules/tick/pause", "schedules/tick/resume",
		"dead/bad-2/replay", "tasks/stay-3/cancel", "queues/default/weight?key=tenant-1&weight=2",
		"queues/tenants/keycap?key=t1&concurrency=3"} {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+s.http+"/ui/api/"+path, nil)
		req.Header.Set(dashboard.CSRFHeader, "1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("dashboard %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}

	// A change of the shard count with tasks to move (stay-*, far-1,
	// bad-2 dead again), run by the scheduler; then a producer on the
	// old layout is redirected.
	testenv.WaitFor(t, 30*time.Second, "bad-2 dead again", func() (bool, string) {
		tk, err := admin.Task(ctx, "bad-2")
		return err == nil && tk.State == inspect.StateDead, fmt.Sprint(tk.State, err)
	})
	if _, err := admin.Resize(ctx, nShards+8); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 90*time.Second, "the change of the shard count ends", func() (bool, string) {
		l, err := admin.Layout(ctx)
		return err == nil && l.State == inspect.LayoutStable && l.Shards == nShards+8, fmt.Sprintf("%+v %v", l, err)
	})
	for _, id := range []string{"stay-19", "far-1", "bad-2"} {
		if _, err := admin.Task(ctx, id); err != nil {
			t.Fatalf("%s after the change: %v", id, err)
		}
	}
	if _, err := prod.Enqueue(ctx, client.Task{ID: "after-1", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "after-1 delivered", func() (bool, string) {
		tg.mu.Lock()
		defer tg.mu.Unlock()
		return tg.count["after-1"] > 0, ""
	})

	// Every component ran as its user, and Redis refused none of them.
	users, err := c.rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range shard.ACLUsers(ns) {
		if !strings.Contains(users, " user=hourglass-"+u.Component+" ") {
			t.Errorf("no connection of user hourglass-%s:\n%s", u.Component, users)
		}
	}
	if n := len(refused()); n > 0 {
		t.Errorf("Redis refused %d commands (logged below)", n)
	}
}

// httpGet GETs http://addrPath and returns the status and body.
func httpGet(addrPath string) (int, string) {
	hc := http.Client{Timeout: 5 * time.Second}
	resp, err := hc.Get("http://" + addrPath)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = fmt.Fprint(&b, resp.Status)
	return resp.StatusCode, b.String()
}
