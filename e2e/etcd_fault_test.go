package e2e_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// Load and fault shape of TestEtcdKilledAndRestarted.
const (
	faultRate          = 100                     // enqueues per second
	faultMaxDelay      = 2 * time.Second         // task delays are uniform in [0, faultMaxDelay]
	faultBefore        = 2 * time.Second         // steady load before the kill
	faultDown          = 4 * time.Second         // etcd stays dead this long
	faultAfter         = 2 * time.Second         // steady load after ownership recovered
	faultRecoverBudget = 30 * time.Second        // restart to all shards owned
	faultDrainBudget   = 30 * time.Second        // last enqueue to every task delivered
	faultFenceBudget   = ttl + 3*time.Second     // kill to every scheduler idle
	faultTick          = time.Second / faultRate // one enqueue per tick
)

// holdEtcdDown keeps etcd dead until until, checking all the while that no
// scheduler claims a shard: without etcd none can know that it still
// owns one.
func holdEtcdDown(t *testing.T, until time.Time, scheds ...*sched) {
	t.Helper()
	for time.Now().Before(until) {
		for _, s := range scheds {
			if st, err := s.status(); err == nil && len(st.Shards) > 0 {
				t.Errorf("%s works %d shards while etcd is dead", s.id, len(st.Shards))
			}
		}
		time.Sleep(50 * time.Millisecond) // sampling interval of the check
	}
}

// reowned reports whether scheds own all shards, balanced and with their
// movers run (settled), each under a newer etcd revision than in before,
// and every scheduler reports working exactly the shards etcd says it
// owns.
func (c *cluster) reowned(before map[int]int64, scheds ...*sched) (bool, string) {
	ids := make([]string, len(scheds))
	for i, s := range scheds {
		ids[i] = s.id
	}
	if ok, msg := c.settled(ids...); !ok {
		return false, msg
	}
	own, ep := c.owners()
	for sh, e := range ep {
		if e <= before[sh] {
			return false, fmt.Sprintf("shard %d still held by %s under its revision %d of before the kill", sh, own[sh], e)
		}
	}
	for _, s := range scheds {
		st, err := s.status()
		if err != nil {
			return false, err.Error()
		}
		if want := len(c.shardsOf(s.id)); len(st.Shards) != want {
			return false, fmt.Sprintf("%s works %d shards, owns %d", s.id, len(st.Shards), want)
		}
	}
	return true, ""
}

// TestEtcdKilledAndRestarted: two schedulers and a worker run a steady
// load (100 enqueues/s, delays 0-2 s) while etcd is SIGKILLed, kept dead
// for 4 s and restarted on the same data directory. Every acknowledged
// enqueue is delivered at least once, none before it is due, both
// schedulers survive and own all shards again. The time from the restart
// to all shards owned and the number of duplicate deliveries are printed.
func TestEtcdKilledAndRestarted(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t)
	tg := newTarget(t)
	args := workerArgs(tg.URL, 30*time.Second, 64)
	s1, s2 := c.start("ef-1", args...), c.start("ef-2", args...)
	testenv.WaitFor(t, 20*time.Second, "2 replicas own 8 each", func() (bool, string) { return c.settled("ef-1", "ef-2") })
	c.startWorker("ef-w", args...)

	prod := startProducer(t, c.cli, "ef", faultTick, faultMaxDelay)
	testenv.WaitFor(t, faultBefore+10*time.Second, "steady load before the kill", func() (bool, string) {
		d, _ := tg.delivered()
		n := prod.count()
		return n >= int(faultBefore/faultTick) && d > 0, fmt.Sprintf("%d enqueued, %d delivered", n, d)
	})

	_, before := c.owners()
	if len(before) != nShards {
		t.Fatalf("%d of %d shards owned before the kill", len(before), nShards)
	}
	c.etcd.Kill()
	killed := time.Now()
	atKill := prod.count()
	for _, s := range []*sched{s1, s2} {
		testenv.WaitFor(t, faultFenceBudget, s.id+" stops working shards after etcd died", func() (bool, string) {
			st, err := s.status()
			return err == nil && len(st.Shards) == 0, fmt.Sprintf("%+v %v", st, err)
		})
	}
	fenced := time.Since(killed)
	holdEtcdDown(t, killed.Add(faultDown), s1, s2)
	duringOutage := prod.count() - atKill

	restartIssued := time.Now()
	c.etcd.Restart() // returns once /health answers
	restarted := time.Now()
	// Right after the restart etcd can still hold the ownership keys of
	// before the kill (leases survive a restart, with their TTL renewed)
	// until their replicas revoke them: recovered means every shard
	// owned under a newer revision than then, its mover run (settled)
	// and worked by the replica that owns it.
	testenv.WaitFor(t, faultRecoverBudget, "all shards owned again after the restart", func() (bool, string) {
		return c.reowned(before, s1, s2)
	})
	recovered := time.Since(restarted)
	for _, s := range []*sched{s1, s2} {
		if !s.Running() {
			t.Errorf("%s exited during the etcd outage", s.id)
		}
	}

	atRecovery := prod.count()
	testenv.WaitFor(t, faultAfter+10*time.Second, "steady load after the recovery", func() (bool, string) {
		n := prod.count() - atRecovery
		return n >= int(faultAfter/faultTick), fmt.Sprintf("%d enqueued since the recovery", n)
	})
	prod.Stop()
	prod.mu.Lock()
	failed, errs := len(prod.unknown), prod.errs
	prod.mu.Unlock()
	acked := prod.count()
	testenv.WaitFor(t, faultDrainBudget, "every acknowledged enqueue delivered", func() (bool, string) {
		m := prod.missing(tg)
		return len(m) == 0, fmt.Sprintf("%d of %d not delivered yet (e.g. %.3v)", len(m), acked, m)
	})

	dupIDs := prod.duplicates(tg)
	early, earliest := prod.early(tg)
	headerEarly := 0
	tg.mu.Lock()
	for _, l := range tg.late {
		if l < 0 {
			headerEarly++
		}
	}
	p50, p99, worst := percentile(tg.late, 0.5), percentile(tg.late, 0.99), percentile(tg.late, 1)
	tg.mu.Unlock()

	if early > 0 {
		t.Errorf("%d of %d tasks reached their target before their delay had passed (earliest %s ahead)", early, acked, earliest)
	}
	if headerEarly > 0 {
		t.Errorf("%d deliveries reached their target before their Hourglass-Due-Ms", headerEarly)
	}
	if failed > 0 {
		t.Logf("%d enqueues failed (Redis was never faulted): %v", failed, errs)
	}
	t.Logf("etcd SIGKILLed for %s: schedulers idle %s after the kill (lease TTL %s); "+
		"restarted etcd healthy after %s; all %d shards owned and worked again %s after that (%s after the restart began)",
		faultDown, fenced.Round(time.Millisecond), ttl, restarted.Sub(restartIssued).Round(time.Millisecond),
		nShards, recovered.Round(time.Millisecond), (recovered + restarted.Sub(restartIssued)).Round(time.Millisecond))
	t.Logf("%d tasks acknowledged (%d while etcd was dead), all delivered; "+
		"duplicates: %d tasks delivered more than once; "+
		"receive - due p50 %s p99 %s max %s",
		acked, duringOutage, dupIDs,
		p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
}
