package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// producer enqueues tasks of queue "default" at a steady rate, as a
// fault test's load, and keeps the books of what was acknowledged: an
// enqueue that returned nil, or one whose outcome was unknown (an error)
// and that a retry with the same id later stored (nil) or found stored
// (ErrDuplicate).
type producer struct {
	cli    *client.Client
	prefix string
	stop   context.CancelFunc
	wg     sync.WaitGroup

	mu   sync.Mutex
	sent map[string]time.Time // id -> when its first enqueue was sent
	// notBefore is, per id, the earliest its target may receive it: the
	// local time before the first call plus its delay (Redis computes
	// the due time from its own clock, after that), to the millisecond.
	notBefore map[string]time.Time
	acked     map[string]time.Time // id -> when acknowledged
	unknown   []string             // outcome unknown: to send again
	errs      map[string]int       // error classes seen
	// firstErr and lastErr are when the first and last failed enqueue
	// returned.
	firstErr, lastErr time.Time
}

// enqueueBudget bounds one of the producer's enqueue calls.
const enqueueBudget = 5 * time.Second

// startProducer enqueues one task every every (ids prefix0, prefix1, …,
// random delays up to maxDelay) until Stop or the test's end.
func startProducer(t *testing.T, cli *client.Client, prefix string, every, maxDelay time.Duration) *producer {
	p, ctx := newProducer(t, cli, prefix)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			id := fmt.Sprintf("%s%d", prefix, i)
			delay := time.Duration(rand.Int64N(int64(maxDelay/time.Millisecond)+1)) * time.Millisecond
			now := time.Now()
			p.mu.Lock()
			p.sent[id], p.notBefore[id] = now, now.Add(delay).Truncate(time.Millisecond)
			p.mu.Unlock()
			cctx, cancel := context.WithTimeout(ctx, enqueueBudget)
			_, err := cli.Enqueue(cctx, client.Task{ID: id, Queue: "default", Payload: []byte(id), Delay: delay})
			cancel()
			p.record(id, err)
		}
	}()
	return p
}

// newProducer returns empty books for ids prefix…, stopped by Stop or at
// the test's end, and the ctx its goroutine runs under.
func newProducer(t *testing.T, cli *client.Client, prefix string) (*producer, context.Context) {
	p := &producer{cli: cli, prefix: prefix, sent: map[string]time.Time{}, notBefore: map[string]time.Time{},
		acked: map[string]time.Time{}, errs: map[string]int{}}
	ctx, stop := context.WithCancel(context.Background())
	p.stop = stop
	t.Cleanup(p.Stop)
	return p, ctx
}

func (p *producer) record(id string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil || errors.Is(err, client.ErrDuplicate) && !errors.Is(err, client.ErrNotReplicated) {
		p.acked[id] = time.Now()
		return
	}
	p.unknown = append(p.unknown, id)
	p.errs[errClass(err)]++
	p.lastErr = time.Now()
	if p.firstErr.IsZero() {
		p.firstErr = p.lastErr
	}
}

// Stop ends the load and waits for the producer's goroutine.
func (p *producer) Stop() {
	p.stop()
	p.wg.Wait()
}

// settle sends every unknown outcome again with the same id until each
// is acknowledged; call it after Stop, once Redis answers again.
func (p *producer) settle(t *testing.T, ctx context.Context) {
	t.Helper()
	p.mu.Lock()
	todo := p.unknown
	p.unknown = nil
	p.mu.Unlock()
	for _, id := range todo {
		// Due when the first call wanted it (a lost first call must not
		// make the task early), or now if that has passed.
		p.mu.Lock()
		at := p.notBefore[id]
		p.mu.Unlock()
		_, err := p.cli.Enqueue(ctx, client.Task{ID: id, Queue: "default", Payload: []byte(id), At: at})
		// Stored, stored before, or stored and not confirmed by replicas
		// (no failover follows here): acknowledged.
		if err != nil && !errors.Is(err, client.ErrDuplicate) && !errors.Is(err, client.ErrNotReplicated) {
			t.Fatalf("enqueue %s again: %v", id, err)
		}
		p.record(id, nil)
	}
	t.Logf("producer %s: %d acknowledged, %d of them after a retry; errors seen: %v", p.prefix, len(p.acked), len(todo), p.errs)
}

// firstDeliveredAfter returns when tg first received a task whose
// enqueue was sent after t (zero if none yet).
func (p *producer) firstDeliveredAfter(tg *target, t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var first time.Time
	for id, at := range p.sent {
		if got, ok := tg.first[id]; ok && at.After(t) && (first.IsZero() || got.Before(first)) {
			first = got
		}
	}
	return first
}

// missing returns the acknowledged ids tg has not received.
func (p *producer) missing(tg *target) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	var out []string
	for id := range p.acked {
		if tg.count[id] == 0 {
			out = append(out, id)
		}
	}
	return out
}

// duplicates counts the acknowledged ids tg received more than once.
func (p *producer) duplicates(tg *target) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	n := 0
	for id := range p.acked {
		if tg.count[id] > 1 {
			n++
		}
	}
	return n
}

// count returns how many enqueues were acknowledged so far.
func (p *producer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// early counts the acknowledged tasks tg first received before their
// delay had passed, and the furthest ahead one was.
func (p *producer) early(tg *target) (n int, worst time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	tg.mu.Lock()
	defer tg.mu.Unlock()
	for id := range p.acked {
		if got, ok := tg.first[id]; ok {
			if ahead := p.notBefore[id].Sub(got); ahead > 0 {
				n++
				worst = max(worst, ahead)
			}
		}
	}
	return n, worst
}

// flow is the end-to-end flow every topology's test runs first: n tasks
// of queue "default" due within a second, enqueued in one batch, each
// delivered to tg exactly once (nothing fails meanwhile).
func (c *cluster) flow(t *testing.T, ctx context.Context, tg *target, n int) {
	t.Helper()
	tasks := make([]client.Task, n)
	for i := range tasks {
		tasks[i] = client.Task{ID: fmt.Sprintf("flow-%d", i), Queue: "default", Delay: time.Duration(i%10) * 100 * time.Millisecond}
	}
	if _, err := c.cli.EnqueueBatch(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the flow delivered", func() (bool, string) {
		d, total := tg.delivered()
		return d == n, fmt.Sprintf("%d distinct, %d in all", d, total)
	})
	if d, total := tg.delivered(); total != d {
		t.Fatalf("flow: %d deliveries of %d tasks", total, d)
	}
}
