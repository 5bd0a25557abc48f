package depth

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gather returns the hourglass_queue_tasks values summed by "queue/state",
// the paused flags by queue, and the error gauge.
func gather(t *testing.T, c *Collector) (map[string]float64, map[string]float64, float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	tasks, paused := map[string]float64{}, map[string]float64{}
	var failed float64
	for _, f := range fams {
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			switch f.GetName() {
			case "hourglass_queue_tasks":
				tasks[l["queue"]+"/"+l["state"]] += m.GetGauge().GetValue()
			case "hourglass_queue_paused":
				paused[l["queue"]] = m.GetGauge().GetValue()
			case "hourglass_queue_depth_errors":
				failed = m.GetGauge().GetValue()
			}
		}
	}
	return tasks, paused, failed
}

// cost returns the calls and microseconds Redis spent in EVALSHA and
// HGETALL so far (INFO commandstats).
func cost(t *testing.T, e *shardtest.Env) (calls, usec int64) {
	t.Helper()
	st := testenv.CommandStats(t, e.RDB)
	return st["evalsha"].Calls, st["evalsha"].Usec + st["hgetall"].Usec
}

// TestGaugesEqualTrueCounts: 16 shards × 10 queues after a known
// workload: the gauges of the owned shards equal the tasks stored; a
// second scrape within MinInterval costs Redis nothing; prints the Redis
// time of one scrape.
func TestGaugesEqualTrueCounts(t *testing.T) {
	t.Parallel()
	queues := map[string]shard.QueuePolicy{}
	for i := range 10 {
		queues[fmt.Sprintf("q%d", i)] = shardtest.Policy()
	}
	e := shardtest.New(t, shardtest.Options{Namespace: "depth", Shards: 16, Queues: queues})
	ctx := testenv.Ctx(t, 30*time.Second)
	// q0: 40 scheduled, 25 ready, 5 popped (in flight), 7 dead.
	var sched []string
	for i := range 40 {
		sched = append(sched, fmt.Sprintf("s%d", i))
	}
	e.Schedule("q0", time.Hour, sched...)
	e.Dead("q0", "dead-", 7)
	e.Popped("q0", "pop-", 5)
	var ready []string
	for i := range 25 {
		ready = append(ready, fmt.Sprintf("r%d", i))
	}
	e.Ready("q0", ready...)
	e.Schedule("q3", time.Hour, "only-one")
	if _, err := e.Store.SetPaused(ctx, "q3", true); err != nil {
		t.Fatal(err)
	}

	all := make([]int, 16)
	for i := range all {
		all[i] = i
	}
	c := New(e.Store, func() []int { return append([]int(nil), all...) }, nil)
	now := time.Now()
	c.now = func() time.Time { return now }
	gather(t, c) // loads the script into Redis's cache
	now = now.Add(MinInterval)
	calls0, usec0 := cost(t, e)
	tasks, paused, failed := gather(t, c)
	calls1, usec1 := cost(t, e)
	want := map[string]float64{"q0/scheduled": 40, "q0/ready": 25, "q0/in_flight": 5, "q0/dead": 7, "q3/scheduled": 1}
	for k, v := range want {
		if tasks[k] != v {
			t.Errorf("%s = %v, want %v", k, tasks[k], v)
		}
	}
	var sum float64
	for _, v := range tasks {
		sum += v
	}
	if sum != 78 || failed != 0 || paused["q3"] != 1 || paused["q0"] != 0 || len(paused) != 10 {
		t.Errorf("sum %v (want 78), failed %v, paused %v", sum, failed, paused)
	}
	// One EVALSHA per shard (nothing else runs on this Redis meanwhile).
	if calls1-calls0 != 16 {
		t.Errorf("%d script calls for one scrape of 16 shards, want 16", calls1-calls0)
	}
	t.Logf("one scrape of 16 shards x 10 queues: %d script calls, %d us of Redis time (EVALSHA + HGETALL)", calls1-calls0, usec1-usec0)

	gather(t, c) // within MinInterval: served from the last collection
	if calls2, _ := cost(t, e); calls2 != calls1 {
		t.Errorf("a scrape within MinInterval made %d script calls", calls2-calls1)
	}

	// A replica owning half the shards exports those only.
	half := New(e.Store, func() []int { return all[:8] }, nil)
	tasks, _, _ = gather(t, half)
	var owned float64
	for _, id := range append(append([]string{}, sched...), ready...) {
		if e.Layout().ShardOf(id) < 8 {
			owned++
		}
	}
	var got float64
	for k, v := range tasks {
		if k == "q0/scheduled" || k == "q0/ready" {
			got += v
		}
	}
	if got != owned {
		t.Errorf("owner of shards 0-7 exports %v scheduled+ready of q0, want %v", got, owned)
	}
}

// TestRedisDownIsReported: a collection that fails exports the error
// gauge and no stale depths.
func TestRedisDownIsReported(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "depth", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, "x")
	c := New(e.Store, func() []int { return []int{0, 1} }, nil)
	now := time.Now()
	c.now = func() time.Time { return now }
	if tasks, _, failed := gather(t, c); failed != 0 || tasks["q/scheduled"] != 1 {
		t.Fatalf("before: %v %v", tasks, failed)
	}
	e.Redis.Kill()
	now = now.Add(MinInterval)
	if tasks, _, failed := gather(t, c); failed != 1 || len(tasks) != 0 {
		t.Fatalf("with Redis down: tasks %v, failed %v", tasks, failed)
	}
}
