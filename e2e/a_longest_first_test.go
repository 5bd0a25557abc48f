package e2e_test

import (
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// The package's longest tests, declared in its first file: the
// package's parallel tests start in the order they are declared (files
// by name), -parallel at a time (testenv.OrderParallel in TestMain,
// testenv.Parallel in each test), so a long test declared last would add
// its whole length to the package's wall time instead of running beside
// the rest.

// TestSoakQueueHistory is TestQueueHistoryCharts (history_test.go) over
// ten minutes, with a rate that changes each minute and a minute the
// queue is paused (its ready tasks pile up), the run #29 asks for (make
// soak). With
// HGTEST_SCREENSHOT_HISTORY set to a path it writes the page's screenshot
// there (docs/history.png).
func TestSoakQueueHistory(t *testing.T) {
	testenv.SkipUnlessSoak(t)
	testenv.Parallel(t)
	testQueueHistory(t, 10*time.Minute)
}

// TestReshardGrowAndShrinkUnderLoad changes the shard count 16 -> 32 ->
// 8 under a steady load (200 tasks/s, delays 0-5 s, from an up-to-date
// producer and one that never reads the layout record), with 1,500 tasks
// hours ahead in the far tier and dead letters, three schedulers and two
// workers; a scheduler is SIGKILLed as the shrink starts. Every
// acknowledged task is delivered, none early, none twice (but after a
// lease the worker lost); the far tasks and dead letters keep their state
// in their new shards; the dropped shards are gone; dedupe, cancel and
// lookup hold before, during and after. The reshard rate and the lateness
// before and during each change are printed.
// TestSoakReshardGrowAndShrinkUnderLoad runs it at 1,000 tasks/s with
// delays up to 10 s and 6,000 far tasks.
func TestReshardGrowAndShrinkUnderLoad(t *testing.T) {
	testenv.Parallel(t)
	testReshard(t, reshardLoad{rate: 200, maxDelay: 5 * time.Second, backlog: 1500})
}

// TestSentinelFlowAndFailover: on a primary, a replica and three
// Sentinels, the end-to-end flow delivers each task exactly once; then
// the primary is SIGKILLed under load and a Sentinel promotes the
// replica: the scheduler and the worker carry on by themselves, /readyz
// reports the outage while it lasts, and with the client's durability
// mode (WAIT for one replica) no acknowledged task is lost. Then the
// failed node is brought back as docs/topologies.md's runbook says (a
// replica of the new primary with replica-priority 0, its priority
// restored once it is in sync), the new primary is SIGKILLed in turn,
// and the node brought back is promoted with every acknowledged task:
// none is lost across both failovers, and each kill caused exactly one
// failover (the runbook's timings: no second one on the promoted
// primary). (While the new primary has no replica in sync, its
// enqueues report ErrNotReplicated, and the producer's retry with the
// same id finds them stored.)
func TestSentinelFlowAndFailover(t *testing.T) {
	testenv.Parallel(t)
	testSentinelFlowAndFailover(t)
}

// TestEndToEndEveryTaskOnce: two schedulers and two worker processes on
// 16 shards deliver 5,000 tasks with random delays of 0-3 s, each exactly
// once (but after a lease the worker lost); lateness at handler start is
// printed (no timing assertion). TestSoakEndToEndEveryTaskOnce delivers
// 20,000.
func TestEndToEndEveryTaskOnce(t *testing.T) {
	testenv.Parallel(t)
	testEveryTaskOnce(t, 5000)
}
