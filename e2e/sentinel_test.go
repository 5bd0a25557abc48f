package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// readyWatch polls a process's /readyz until stopped and remembers
// whether it answered 503 and, after that, 200 again.
type readyWatch struct {
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu               sync.Mutex
	down, downThenUp bool
	firstDown        time.Time
}

func watchReady(t *testing.T, addr string) *readyWatch {
	ctx, stop := context.WithCancel(context.Background())
	w := &readyWatch{stop: stop}
	t.Cleanup(w.Stop)
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			req, _ := http.NewRequestWithContext(rctx, "GET", "http://"+addr+"/readyz", nil)
			resp, err := http.DefaultClient.Do(req)
			cancel()
			if err != nil {
				continue
			}
			resp.Body.Close()
			w.mu.Lock()
			switch {
			case resp.StatusCode == http.StatusServiceUnavailable && !w.down:
				w.down, w.firstDown = true, time.Now()
			case resp.StatusCode == http.StatusOK && w.down:
				w.downThenUp = true
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// Stop ends the polling and waits for it.
func (w *readyWatch) Stop() { w.stop(); w.wg.Wait() }

// testSentinelFlowAndFailover is TestSentinelFlowAndFailover's body
// (declared in a_longest_first_test.go).
func testSentinelFlowAndFailover(t *testing.T) {
	c := newCluster(t, withSentinel())
	tg := newTarget(t)
	args := append(workerArgs(tg.URL, 5*time.Second, 16), "-set", "scheduler.strand_check=500ms")
	s := c.start("sn-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("sn-s") })
	w := c.startWorker("sn-w", args...)
	ctx := testenv.Ctx(t, 3*time.Minute)

	c.flow(t, ctx, tg, 300)

	// The failover, under load, with the durability mode.
	durable, err := client.New(c.rdb, client.Config{Shards: nShards, WaitReplicas: 1, WaitTimeout: time.Second, RetryFor: client.RetryForNone})
	if err != nil {
		t.Fatal(err)
	}
	ready := watchReady(t, s.http)
	p := startProducer(t, durable, "fo-", 10*time.Millisecond, 2*time.Second)
	loadStart := time.Now()
	testenv.WaitFor(t, 20*time.Second, "load delivered", func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.acked) > 100, fmt.Sprint(len(p.acked))
	})
	<-time.After(time.Until(loadStart.Add(1500 * time.Millisecond))) // timed phase: load before the kill
	sn := c.sentinel
	old := sn.Primary.Addr
	killed := time.Now()
	sn.Primary.Kill()
	promoted, err := sn.WaitForNewPrimary(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	promotedAfter := time.Since(killed)
	t.Logf("primary %s SIGKILLed; Sentinels promoted %s %s later", old, promoted, promotedAfter.Round(time.Millisecond))

	// The runbook brings the failed node back: a replica of the new
	// primary, never promoted (priority 0) until it is in sync; then its
	// priority is restored. WAIT is satisfied again from the sync on.
	back := time.Now()
	sn.RestartAsReplica(sn.Primary, promoted)
	sn.WaitSentinelsSee(old, 0)
	sn.WaitInSync(old, promoted)
	synced := time.Since(back)
	sn.SetReplicaPriority(old, 100)
	t.Logf("%s back as a replica: in sync %s after its restart, priority 100 seen by every Sentinel %s after it",
		old, synced.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))
	if n := sn.Switches(); n != 1 {
		t.Fatalf("the Sentinels switched the primary %d times for one kill", n)
	}
	var resumed time.Time
	testenv.WaitFor(t, 30*time.Second, "a task sent after the kill delivered", func() (bool, string) {
		resumed = p.firstDeliveredAfter(tg, killed)
		return !resumed.IsZero(), "none yet"
	})
	<-time.After(time.Until(resumed.Add(time.Second))) // timed phase: load after the failover

	// The new primary dies in turn: the node brought back is the only
	// replica, and is promoted with everything acknowledged so far.
	killed2 := time.Now()
	sn.Replica.Kill()
	again, err := sn.WaitForNewPrimary(ctx, promoted)
	if err != nil {
		t.Fatal(err)
	}
	if again != old {
		t.Fatalf("second failover promoted %s, want the node brought back, %s", again, old)
	}
	t.Logf("%s SIGKILLed; Sentinels promoted %s %s later", promoted, again, time.Since(killed2).Round(time.Millisecond))
	sn.RestartAsReplica(sn.Replica, again)
	sn.WaitInSync(promoted, again)
	if n := sn.Switches(); n != 2 {
		t.Fatalf("the Sentinels switched the primary %d times for two kills", n)
	}
	testenv.WaitFor(t, 30*time.Second, "a task sent after the second kill delivered", func() (bool, string) {
		return !p.firstDeliveredAfter(tg, killed2).IsZero(), "none yet"
	})

	p.Stop()
	p.settle(t, ctx)
	testenv.WaitFor(t, 45*time.Second, "every acknowledged task delivered", func() (bool, string) {
		m := p.missing(tg)
		return len(m) == 0, fmt.Sprintf("%d missing, e.g. %.5v", len(m), m)
	})
	ready.Stop()
	ready.mu.Lock()
	down, up, firstDown := ready.down, ready.downThenUp, ready.firstDown
	ready.mu.Unlock()
	if !down || !up {
		t.Errorf("/readyz during the failover: 503 seen %v, 200 again after it %v", down, up)
	}
	for _, proc := range []*sched{s, w} {
		if !proc.Running() {
			t.Errorf("%s exited: it should have carried on by itself", proc.id)
		}
	}
	p.mu.Lock()
	acked := len(p.acked)
	p.mu.Unlock()
	t.Logf("two failovers: %d acknowledged, 0 lost, %d delivered more than once; /readyz 503 %s after the first kill; "+
		"first delivery of a task enqueued after the first kill %s after it",
		acked, p.duplicates(tg), firstDown.Sub(killed).Round(time.Millisecond), resumed.Sub(killed).Round(time.Millisecond))
}
