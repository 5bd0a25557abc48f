// Package groupcommit sends calls that overlap in time as one (group
// commit): a call made while another is in flight waits for it, and the
// calls that waited meanwhile then go together, in one round trip of
// the function the Combiner was made with. A call made while none is in
// flight goes at once, alone, so a Combiner adds no delay; under load,
// when calls start to queue behind each other, they share their round
// trips and Redis's per-call cost.
//
// It has no goroutine of its own: the first call of a batch sends it,
// and hands the next batch to the first of its calls before it returns.
// The schedulers' movers (internal/scan) and the client's Enqueue and
// small EnqueueBatch calls use it.
package groupcommit

import (
	"context"
	"sync"
	"time"
)

// Combiner combines concurrent calls of Do into calls of its send
// function. The zero value is not usable; make one with New.
type Combiner[Req, Out any] struct {
	send func(ctx context.Context, reqs []Req) []Out

	mu      sync.Mutex
	busy    bool              // a batch is being sent
	waiting []*call[Req, Out] // calls made meanwhile: the next batch
}

// call is one Do in a Combiner.
type call[Req, Out any] struct {
	ctx   context.Context
	req   Req
	out   Out
	done  chan struct{} // closed when out is set, for a call its batch's first sent
	lead  chan struct{} // closed when this call must send batch
	batch []*call[Req, Out]
}

// New returns a Combiner whose batches send calls. send gets the batch's
// requests in the order the calls were made and must return one output
// per request, in that order. A call that goes alone runs send with its
// own ctx. A batch of several runs it with the first call's ctx without
// its cancellation (one caller's cancellation must not fail the others'
// calls) and with the latest of the calls' deadlines (none if one of
// them has none).
func New[Req, Out any](send func(ctx context.Context, reqs []Req) []Out) *Combiner[Req, Out] {
	return &Combiner[Req, Out]{send: send}
}

// Do sends req, alone or with other calls, and returns its output. A
// call whose ctx has ended, or ends while it waits for the batch in
// flight before its own batch was formed, returns ok false: not sent.
// Once its batch was formed it waits for it (it may have to send it),
// one round trip of send.
func (c *Combiner[Req, Out]) Do(ctx context.Context, req Req) (out Out, ok bool) {
	if ctx.Err() != nil {
		return out, false
	}
	cl := &call[Req, Out]{ctx: ctx, req: req, done: make(chan struct{}), lead: make(chan struct{})}
	c.mu.Lock()
	if c.busy {
		c.waiting = append(c.waiting, cl)
		c.mu.Unlock()
		select {
		case <-cl.done:
			return cl.out, true
		case <-cl.lead:
		case <-ctx.Done():
			if c.withdraw(cl) {
				return out, false
			}
			select { // taken into a batch meanwhile: see it through
			case <-cl.done:
				return cl.out, true
			case <-cl.lead:
			}
		}
	} else {
		c.busy = true
		cl.batch = []*call[Req, Out]{cl}
		c.mu.Unlock()
	}
	c.sendBatch(cl.batch)
	return cl.out, true
}

// withdraw takes cl out of the waiting calls; it reports false when cl
// was already taken into a batch.
func (c *Combiner[Req, Out]) withdraw(cl *call[Req, Out]) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.waiting {
		if w == cl {
			c.waiting = append(c.waiting[:i], c.waiting[i+1:]...)
			return true
		}
	}
	return false
}

// sendBatch sends batch (its first call is the caller's), hands the
// calls that waited meanwhile to the first of them, and wakes the rest
// of batch.
func (c *Combiner[Req, Out]) sendBatch(batch []*call[Req, Out]) {
	reqs := make([]Req, len(batch))
	for i, cl := range batch {
		reqs[i] = cl.req
	}
	ctx, cancel := batchContext(batch)
	outs := c.send(ctx, reqs)
	cancel()
	for i, cl := range batch {
		cl.out = outs[i]
	}
	c.mu.Lock()
	next := c.waiting
	c.waiting = nil
	c.busy = len(next) > 0
	c.mu.Unlock()
	if len(next) > 0 {
		next[0].batch = next
		close(next[0].lead)
	}
	for _, cl := range batch[1:] {
		close(cl.done)
	}
}

// batchContext returns the ctx a batch is sent with (see New).
func batchContext[Req, Out any](batch []*call[Req, Out]) (context.Context, context.CancelFunc) {
	if len(batch) == 1 {
		return batch[0].ctx, func() {}
	}
	var latest time.Time
	for _, cl := range batch {
		d, ok := cl.ctx.Deadline()
		if !ok {
			return context.WithoutCancel(batch[0].ctx), func() {}
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].ctx), latest)
}

// Idle reports whether no batch is in flight and no call waits (for
// tests).
func (c *Combiner[Req, Out]) Idle() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.busy && len(c.waiting) == 0
}

// Waiting returns how many calls wait for the batch in flight (for
// tests).
func (c *Combiner[Req, Out]) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiting)
}
