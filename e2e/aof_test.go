package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestAOFAlwaysLosesNothing: with Redis's append-only file fsynced on
// every write (appendfsync always), a SIGKILL of redis-server under load
// loses no acknowledged enqueue. One scheduler and one worker process,
// never restarted, reconnect by themselves; a producer enqueues 200
// tasks/s with delays of 0-3 s before, during and after a 1 s outage.
// An enqueue that returned nil is acknowledged; one that returned an
// error has an unknown outcome (client docs) and is sent again with the
// same id once Redis is back: nil or ErrDuplicate then acknowledges it
// (producer_test.go keeps these books).
// Every acknowledged id must reach the HTTP target at least once
// (duplicates are allowed and counted: delivery is at least once).
func TestAOFAlwaysLosesNothing(t *testing.T) {
	testenv.Parallel(t)
	c := newCluster(t, withRedis(testenv.WithRedisArgs("--appendonly", "yes", "--appendfsync", "always", "--save", "")))
	ctx := testenv.Ctx(t, 2*time.Minute)
	if v, err := c.rdb.ConfigGet(ctx, "appendfsync").Result(); err != nil || v["appendfsync"] != "always" {
		t.Fatalf("redis appendfsync = %v %v, want always", v, err)
	}

	tg := newTarget(t)
	// A 2 s lease and a 500 ms strand check bring back quickly the tasks
	// whose ack (or lease) the outage swallowed.
	args := append(workerArgs(tg.URL, 2*time.Second, 32),
		"-set", "scheduler.strand_check=500ms", "-set", "queues.default.backoff.base=200ms")
	s := c.start("aof-s", args...)
	testenv.WaitFor(t, 20*time.Second, "replica owns all shards", func() (bool, string) { return c.settled("aof-s") })
	w := c.startWorker("aof-w", args...)

	// The producer's own connection and client retry nothing, so every
	// failure during the outage reaches it (the default client would
	// hide a short outage behind its own retries).
	prdb := redis.NewClient(&redis.Options{Addr: c.redis.Addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { prdb.Close() })
	pcli, err := client.New(prdb, client.Config{Shards: nShards, RetryFor: client.RetryForNone})
	if err != nil {
		t.Fatal(err)
	}

	p := startProducer(t, pcli, "aof-", 5*time.Millisecond, 3*time.Second) // 200 tasks/s
	loadStart := time.Now()
	testenv.WaitFor(t, 20*time.Second, "first delivery", func() (bool, string) {
		d, _ := tg.delivered()
		return d > 0, "none yet"
	})
	<-time.After(time.Until(loadStart.Add(2 * time.Second))) // timed phase: 2 s of load

	killed := time.Now()
	c.redis.Kill()
	ackedBeforeKill := p.count()
	<-time.After(time.Second) // timed phase: Redis down for 1 s under load
	// restarted is when the new redis-server is started; Restart returns
	// once it answers PING (its probe may add a few hundred ms).
	restarted := time.Now()
	c.redis.Restart()
	answered := time.Now()
	<-time.After(2 * time.Second) // timed phase: 2 s of load after the restart
	p.Stop()
	loadEnd := time.Now()

	// Send every unknown outcome again with the same id.
	p.mu.Lock()
	retried := map[string]bool{}
	for _, id := range p.unknown {
		retried[id] = true
	}
	sent, errs, firstErr, lastErr := len(p.sent), maps.Clone(p.errs), p.firstErr, p.lastErr
	p.mu.Unlock()
	p.settle(t, ctx)

	// Evidence if something acknowledged never arrives: where the id is
	// now, and whether Redis's append-only file ever held it.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		lost := p.missing(tg)
		sort.Strings(lost)
		aof := readAOF(c.redis.Dir)
		for i, id := range lost {
			if i == 20 {
				t.Logf("... and %d more", len(lost)-20)
				break
			}
			p.mu.Lock()
			at := p.acked[id]
			p.mu.Unlock()
			info, err := c.cli.Lookup(context.Background(), id)
			t.Logf("not delivered: %s acknowledged %s after the kill (by a retry: %v); lookup: state %q attempts %d due %s, err %v; in the AOF: %v",
				id, at.Sub(killed).Round(time.Millisecond), retried[id], info.State, info.Attempts, info.Due.Format("15:04:05.000"), err,
				strings.Contains(aof, id+"|") || strings.Contains(aof, id+"\r\n"))
		}
	})

	acked := p.count()
	testenv.WaitFor(t, 45*time.Second, "every acknowledged task delivered at least once", func() (bool, string) {
		m := p.missing(tg)
		return len(m) == 0, fmt.Sprintf("%d of %d acknowledged tasks not delivered, e.g. %.5v", len(m), acked, m)
	})
	delivered := time.Now()

	if !s.Running() || !w.Running() {
		t.Fatalf("scheduler running %v, worker running %v: both must ride out the Redis restart", s.Running(), w.Running())
	}
	p.mu.Lock()
	tg.mu.Lock()
	distinct, dupIDs, extra, strangers := len(tg.count), 0, 0, 0
	for id, n := range tg.count {
		if n > 1 {
			dupIDs++
			extra += n - 1
		}
		if _, ok := p.acked[id]; !ok {
			strangers++
		}
	}
	var firstAfter time.Time
	var lateAfter []time.Duration // first delivery - due, tasks acknowledged after the restart
	for id, ts := range tg.first {
		if at, ok := p.acked[id]; ok && at.After(restarted) && !retried[id] {
			if firstAfter.IsZero() || ts.Before(firstAfter) {
				firstAfter = ts
			}
			lateAfter = append(lateAfter, ts.Sub(p.notBefore[id]))
		}
	}
	tg.mu.Unlock()
	p.mu.Unlock()
	at := tg.arrived()
	var lastBefore, resumed time.Time
	for _, ts := range at {
		if ts.Before(killed) {
			lastBefore = ts
		} else if ts.After(restarted) && resumed.IsZero() {
			resumed = ts
		}
	}
	duringOutage := 0
	for _, ts := range at {
		if ts.After(killed) && ts.Before(restarted) {
			duringOutage++
		}
	}

	var errList []string
	for k, n := range errs {
		errList = append(errList, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(errList)
	var errSpan string
	if !firstErr.IsZero() {
		errSpan = fmt.Sprintf(", from %s to %s after the kill", firstErr.Sub(killed).Round(time.Millisecond), lastErr.Sub(killed).Round(time.Millisecond))
	}
	t.Logf("appendfsync always, redis SIGKILLed after %s of load (%d acknowledged by then), restarted %s later (answered the harness's PING %s after that), load for %s in all",
		killed.Sub(loadStart).Round(time.Millisecond), ackedBeforeKill, restarted.Sub(killed).Round(time.Millisecond),
		answered.Sub(restarted).Round(time.Millisecond), loadEnd.Sub(loadStart).Round(time.Millisecond))
	t.Logf("enqueues: %d sent, %d acknowledged (%d at once, %d by a retry with the same id after an error), 0 lost",
		sent, acked, acked-len(retried), len(retried))
	t.Logf("enqueue errors: %d%s: %s", len(retried), errSpan, strings.Join(errList, "; "))
	t.Logf("deliveries: %d distinct ids (%d not acknowledged), %d delivered more than once (%d extra deliveries), %d deliveries between the kill and the restart (tasks popped before the kill); all delivered %s after the restart",
		distinct, strangers, dupIDs, extra, duringOutage, delivered.Sub(restarted).Round(time.Millisecond))
	t.Logf("first delivery after the restart: %s after it (last one before the kill: %s before it); first delivery of a task enqueued after the restart (the whole path reconnected): %s after the restart; "+
		"%d tasks enqueued after the restart: receive - due p50 %s max %s",
		sinceOrNever(resumed, restarted), sinceOrNever(killed, lastBefore), sinceOrNever(firstAfter, restarted),
		len(lateAfter), percentile(lateAfter, 0.5), percentile(lateAfter, 1))
}

// errClass shortens an enqueue error to its kind, without addresses or
// ids, for counting.
func errClass(err error) string {
	s := err.Error()
	for _, k := range []string{"connection refused", "connection reset", "broken pipe", "EOF", "LOADING", "i/o timeout", "not yet replicated", "context canceled"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// sinceOrNever formats b - a, or "never" if b is zero.
func sinceOrNever(b, a time.Time) string {
	if b.IsZero() || a.IsZero() {
		return "never"
	}
	return b.Sub(a).Round(time.Millisecond).String()
}

// readAOF returns the contents of every append-only file under dir
// (Redis 7 keeps them in appendonlydir/).
func readAOF(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "appendonlydir", "*"))
	more, _ := filepath.Glob(filepath.Join(dir, "*.aof"))
	for _, f := range append(files, more...) {
		if data, err := os.ReadFile(f); err == nil {
			b.Write(data)
		}
	}
	return b.String()
}
