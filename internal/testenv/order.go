package testenv

import (
	"flag"
	"strconv"
	"sync"
	"testing"
	"time"
)

// order admits tests in the order they asked, at most limit at a time.
type order struct {
	mu      sync.Mutex
	limit   int             // 0: not in use (Parallel is t.Parallel)
	running int             // admitted and not ended
	waiting []chan struct{} // not admitted yet, in the order they asked
}

// ordered is the order of the package's parallel tests (OrderParallel).
var ordered order

// OrderParallel makes Parallel start the package's parallel tests in the
// order they are declared, at most -parallel at a time (n when the
// command line does not set it). Call it from TestMain before Main.
//
// The testing package resumes paused parallel tests in no particular
// order (goroutines woken at once, whichever takes a free slot first), so
// a package's longest test, declared first, may start last and add its
// whole length to the package's wall time. A test calls Parallel before
// testing pauses it, while go test still runs the package's tests one by
// one in source order (files by name), so the calls come in declaration
// order; testing's own limit is lifted so that it is Parallel's that
// holds, and a test of the package that calls t.Parallel directly is not
// counted in it. The time go test reports for a test includes its wait
// for a turn (testing counts from its own resume).
func OrderParallel(n int) {
	if !flag.Parsed() {
		flag.Parse()
	}
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			if v, err := strconv.Atoi(f.Value.String()); err == nil && v > 0 {
				n = v
			}
		}
	})
	ordered.mu.Lock()
	ordered.limit = max(n, 1)
	ordered.mu.Unlock()
	_ = flag.Set("test.parallel", strconv.Itoa(1<<20))
}

// Parallel is t.Parallel, and in a package whose TestMain called
// OrderParallel it also waits for the test's turn: see OrderParallel.
// It is for top-level tests: a subtest waiting for a turn that its
// parent, waiting for its subtests, holds would wait for ever; subtests
// call t.Parallel.
func Parallel(t *testing.T) {
	t.Helper()
	turn := ordered.ask()
	t.Parallel()
	if turn == nil {
		return
	}
	start := time.Now()
	<-turn
	t.Cleanup(ordered.done)
	if waited := time.Since(start); waited >= time.Second {
		t.Logf("testenv: waited %s for its turn to run (OrderParallel); the test's time includes it", waited.Round(time.Second))
	}
}

// ask queues a request and returns the channel closed when it is
// admitted, or nil when o is not in use.
func (o *order) ask() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.limit == 0 {
		return nil
	}
	turn := make(chan struct{})
	o.waiting = append(o.waiting, turn)
	o.admit()
	return turn
}

// done ends an admitted request and admits the next.
func (o *order) done() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.running--
	o.admit()
}

// admit lets the first waiting requests in while fewer than the limit
// run. The caller holds o.mu.
func (o *order) admit() {
	for o.running < o.limit && len(o.waiting) > 0 {
		close(o.waiting[0])
		o.waiting = o.waiting[1:]
		o.running++
	}
}
