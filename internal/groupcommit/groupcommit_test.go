package groupcommit

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// gated is a send function that records its batches and blocks each
// until released.
type gated struct {
	mu      sync.Mutex
	batches [][]int
	ctxs    []context.Context
	entered chan struct{}
	release chan struct{}
}

func newGated() *gated {
	return &gated{entered: make(chan struct{}, 100), release: make(chan struct{}, 100)}
}

func (g *gated) send(ctx context.Context, reqs []int) []string {
	g.mu.Lock()
	g.batches = append(g.batches, slices.Clone(reqs))
	g.ctxs = append(g.ctxs, ctx)
	g.mu.Unlock()
	g.entered <- struct{}{}
	<-g.release
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = fmt.Sprint("out-", r)
	}
	return out
}

func (g *gated) got() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.batches)
}

// TestOverlappingCallsGoTogether: a call alone goes at once; the calls
// made while it is in flight go together, each gets its own output, and
// a waiting call whose ctx ends is withdrawn, not sent.
func TestOverlappingCallsGoTogether(t *testing.T) {
	t.Parallel()
	g := newGated()
	c := New(g.send)
	type res struct {
		out string
		ok  bool
	}
	results := make([]res, 6)
	var wg sync.WaitGroup
	do := func(ctx context.Context, i int) {
		wg.Go(func() {
			out, ok := c.Do(ctx, i)
			results[i] = res{out, ok}
		})
	}
	do(context.Background(), 0)
	<-g.entered // call 0 in flight, alone
	withdrawn, cancel := context.WithCancel(context.Background())
	for i := 1; i <= 4; i++ {
		do(context.Background(), i)
	}
	do(withdrawn, 5)
	testenv.WaitFor(t, 10*time.Second, "five calls waiting", func() (bool, string) { return c.Waiting() == 5, "" })
	cancel()
	testenv.WaitFor(t, 10*time.Second, "the cancelled call withdrawn", func() (bool, string) { return c.Waiting() == 4, "" })
	g.release <- struct{}{} // call 0 returns; 1..4 go as one batch
	<-g.entered
	g.release <- struct{}{}
	wg.Wait()

	if b := g.got(); len(b) != 2 || !slices.Equal(b[0], []int{0}) || len(b[1]) != 4 {
		t.Fatalf("batches %v, want [0] then the four calls that waited", b)
	}
	for i := 0; i <= 4; i++ {
		if want := fmt.Sprint("out-", i); !results[i].ok || results[i].out != want {
			t.Errorf("call %d: %+v, want %q", i, results[i], want)
		}
	}
	if results[5].ok {
		t.Errorf("the withdrawn call: %+v, want not sent", results[5])
	}
	if !c.Idle() {
		t.Error("combiner busy after every call returned")
	}
}

// TestBatchContext: a call alone runs on its own ctx; a batch runs
// without the first call's cancellation, with the latest deadline of its
// calls; a call whose ctx has ended is not sent.
func TestBatchContext(t *testing.T) {
	t.Parallel()
	g := newGated()
	c := New(g.send)
	first, cancelFirst := context.WithTimeout(context.Background(), time.Minute)
	defer cancelFirst()
	var wg sync.WaitGroup
	wg.Go(func() { c.Do(first, 0) })
	<-g.entered
	soon, cancelSoon := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelSoon()
	late, cancelLate := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancelLate()
	wg.Go(func() { c.Do(soon, 1) })
	wg.Go(func() { c.Do(late, 2) })
	testenv.WaitFor(t, 10*time.Second, "two calls waiting", func() (bool, string) { return c.Waiting() == 2, "" })
	g.release <- struct{}{}
	<-g.entered
	cancelSoon() // whichever of the two leads the batch,
	cancelLate() // its cancellation does not end it
	g.mu.Lock()
	batchCtx := g.ctxs[1]
	g.mu.Unlock()
	if batchCtx.Err() != nil {
		t.Errorf("the batch's ctx ended with its first call's: %v", batchCtx.Err())
	}
	lateDeadline, _ := late.Deadline()
	if d, ok := batchCtx.Deadline(); !ok || !d.Equal(lateDeadline) {
		t.Errorf("the batch's deadline %v (%v), want the latest of its calls', %v", d, ok, lateDeadline)
	}
	g.release <- struct{}{}
	wg.Wait()
	g.mu.Lock()
	alone := g.ctxs[0]
	g.mu.Unlock()
	if alone != context.Context(first) {
		t.Error("a call alone did not run on its own ctx")
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if _, ok := c.Do(ended, 9); ok {
		t.Error("a call whose ctx had ended was sent")
	}
	if n := len(g.got()); n != 2 {
		t.Errorf("%d batches sent, want 2", n)
	}
}
