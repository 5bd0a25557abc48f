package e2e_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// keyRuns records, at an HTTP target, how many tasks of each key run at
// once: the most before and after a moment (the cap's change), and each
// start and end of one key's tasks.
type keyRuns struct {
	mu                sync.Mutex
	running           map[string]int
	most, mostAfter   map[string]int
	changed           bool
	firstOver         time.Time // the first start that took the watched key above its old cap
	oldCap            int
	watch             string
	starts, ends      []time.Time // the watched key's, before the change
	startsAll, endsOf int
}

func (k *keyRuns) begin(key string) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running[key]++
	n := k.running[key]
	if !k.changed {
		k.most[key] = max(k.most[key], n)
	} else {
		k.mostAfter[key] = max(k.mostAfter[key], n)
	}
	if key == k.watch {
		k.startsAll++
		if !k.changed {
			k.starts = append(k.starts, now)
		} else if n > k.oldCap && k.firstOver.IsZero() {
			k.firstOver = now
		}
	}
}

func (k *keyRuns) end(key string) {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.running[key]--
	if key == k.watch && !k.changed {
		k.ends = append(k.ends, now)
	}
}

// TestKeyCapAcrossWorkerProcesses (#28): a fair queue with a cap of 3 per
// key (queues.default.key_concurrency), the deployment placed by key
// (hourglass shards resize --placement key), three worker processes of
// 10 slots each. One key's 300 tasks and five other keys' 40 each, due at
// once: the hot key never runs more than 3 at once across the three
// processes, and does reach 3, while the others run beside it; a freed
// permit's next start is measured; hourglass queue keycap raises the hot
// key's cap to 6 at run time, and it runs more than 3 at once soon after
// (the time is printed); every task is delivered.
func TestKeyCapAcrossWorkerProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tg := newTarget(t)
	runs := &keyRuns{running: map[string]int{}, most: map[string]int{}, mostAfter: map[string]int{}, watch: "hot", oldCap: 3}
	tg.setBehave(func(_ http.ResponseWriter, _ *http.Request, id string, _ int) bool {
		key := shard.KeyOf(id)
		runs.begin(key)
		time.Sleep(40 * time.Millisecond)
		runs.end(key)
		return false
	})
	args := append(workerArgs(tg.URL, 10*time.Second, 10),
		"-set", "queues.default.fair=true", "-set", "queues.default.fair_window=8", "-set", "queues.default.key_concurrency=3")
	c.start("cap-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("cap-s") })
	cli := newCLI(t, c)
	if out, errOut, code := cli.run("shards", "resize", fmt.Sprint(nShards), "--placement", "key", "--yes", "--timeout", "30s"); code != 0 || !strings.Contains(out, "done:") {
		t.Fatalf("shards resize --placement key: exit %d\n%s%s", code, out, errOut)
	}
	for i := range 3 {
		c.startWorker(fmt.Sprintf("cap-w%d", i), args...)
	}
	ctx := testenv.Ctx(t, 2*time.Minute)
	due := time.Now().Add(2 * time.Second)
	var tasks []client.Task
	for i := range 300 {
		tasks = append(tasks, client.Task{Queue: "default", Key: "hot", ID: fmt.Sprintf("%03d", i), At: due})
	}
	for k := range 5 {
		for i := range 40 {
			tasks = append(tasks, client.Task{Queue: "default", Key: fmt.Sprintf("k%d", k), ID: fmt.Sprintf("%03d", i), At: due})
		}
	}
	if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "60 of the hot key's tasks started", func() (bool, string) {
		runs.mu.Lock()
		defer runs.mu.Unlock()
		return runs.startsAll >= 60, fmt.Sprint(runs.startsAll)
	})
	runs.mu.Lock()
	runs.changed = true
	runs.mu.Unlock()
	asked := time.Now()
	if out, errOut, code := cli.run("queue", "keycap", "default", "hot", "6"); code != 0 {
		t.Fatalf("queue keycap: exit %d\n%s%s", code, out, errOut)
	}
	answered := time.Now()
	testenv.WaitFor(t, time.Minute, "every task delivered", func() (bool, string) {
		n, _ := tg.delivered()
		return n == len(tasks), fmt.Sprint(n)
	})

	runs.mu.Lock()
	defer runs.mu.Unlock()
	// The freed permits: each start of the hot key's after its first 3
	// (while capped) against the last end before it.
	var waits []time.Duration
	for i, s := range runs.starts {
		if i < 3 {
			continue
		}
		var last time.Time
		for _, e := range runs.ends {
			if !e.After(s) && e.After(last) {
				last = e
			}
		}
		if !last.IsZero() {
			waits = append(waits, s.Sub(last))
		}
	}
	t.Logf("most running at once per key, capped at 3: %v; the hot key after its cap went to 6: %d", runs.most, runs.mostAfter["hot"])
	t.Logf("a freed permit to the next start of its key (handler end to handler start, %d starts): p50 %v, p99 %v",
		len(waits), percentile(waits, 0.5), percentile(waits, 0.99))
	if !runs.firstOver.IsZero() {
		t.Logf("the raised cap took effect %v after queue keycap was run (%v after it returned; the command took %v)",
			runs.firstOver.Sub(asked).Round(time.Millisecond), runs.firstOver.Sub(answered).Round(time.Millisecond), answered.Sub(asked).Round(time.Millisecond))
	}
	for key, n := range runs.most {
		if n > 3 {
			t.Errorf("key %s ran %d tasks at once under a cap of 3", key, n)
		}
	}
	if runs.most["hot"] != 3 {
		t.Errorf("the hot key ran at most %d at once, want its cap, 3", runs.most["hot"])
	}
	if n := runs.mostAfter["hot"]; n <= 3 || n > 6 {
		t.Errorf("after its cap went to 6 the hot key ran at most %d at once, want 4..6", n)
	}
	if others := runs.most["k0"] + runs.most["k1"] + runs.most["k2"] + runs.most["k3"] + runs.most["k4"]; others < 5 {
		t.Errorf("the other keys barely ran beside the hot one: %v", runs.most)
	}
}
