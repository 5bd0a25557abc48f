package scan

import (
	"context"
	"sync"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// combiner sends the mover calls of a scheduler's shards that overlap in
// time as one round trip (group commit): a call made while another is
// in flight waits for it, and then every call that waited meanwhile goes
// together, as one shard.Store.MoveMany. A call made while none is in
// flight goes at once, alone, as it would without the combiner, so it
// adds no delay; under load, when calls start to queue behind each
// other, they share their round trip and Redis's per-call cost, which is
// what a shard seeing one task per call pays most for. Each shard keeps
// its own fence, LIMIT and reply.
//
// No goroutine of its own: the first call of a batch sends it, and hands
// the next batch to its first call before it returns.
type combiner struct {
	store *shard.Store
	met   *Metrics

	mu      sync.Mutex
	busy    bool        // a batch is being sent
	waiting []*moveCall // calls made meanwhile: the next batch
}

// moveCall is one shard's call in a combiner.
type moveCall struct {
	req   shard.MoveRequest
	out   shard.MoveOutcome
	done  chan struct{} // closed when out is set, for a call its batch's first sent
	lead  chan struct{} // closed when this call must send batch
	batch []*moveCall   // the batch this call sends (itself first)
}

// move moves req's due tasks, alone or with other shards' calls, and
// returns its outcome. ctx bounds the call as Store.MoveAhead's does;
// a call sent together with others runs on none of their ctx's
// cancellation (go-redis ends a call on its deadline, not on its
// cancellation, in either case), so that one shard's stop does not fail
// the others' calls.
func (c *combiner) move(ctx context.Context, req shard.MoveRequest) (shard.MoveResult, error) {
	mc := &moveCall{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	c.mu.Lock()
	if c.busy {
		c.waiting = append(c.waiting, mc)
		c.mu.Unlock()
		select {
		case <-mc.done:
			return mc.out.Result, mc.out.Err
		case <-mc.lead:
		}
	} else {
		c.busy = true
		mc.batch = []*moveCall{mc}
		c.mu.Unlock()
	}
	c.send(ctx, mc.batch)
	return mc.out.Result, mc.out.Err
}

// send sends batch (its first call is the caller's), hands the calls
// that waited meanwhile to the first of them, and wakes the rest of
// batch.
func (c *combiner) send(ctx context.Context, batch []*moveCall) {
	if len(batch) == 1 {
		r := batch[0].req
		batch[0].out.Result, batch[0].out.Err = c.store.MoveAhead(ctx, r.Shard, r.Epoch, r.Limit, r.Prefetch)
	} else {
		reqs := make([]shard.MoveRequest, len(batch))
		for i, mc := range batch {
			reqs[i] = mc.req
			reqs[i].Limit = shareLimit(mc.req.Limit, len(batch))
		}
		for i, out := range c.store.MoveMany(context.WithoutCancel(ctx), reqs) {
			batch[i].out = out
		}
	}
	c.met.observeShared(len(batch))
	c.mu.Lock()
	next := c.waiting
	c.waiting = nil
	c.busy = len(next) > 0
	c.mu.Unlock()
	if len(next) > 0 {
		next[0].batch = next
		close(next[0].lead)
	}
	for _, mc := range batch[1:] {
		close(mc.done)
	}
}

// minShare is the least LIMIT a shard keeps in a combined call.
const minShare = 64

// shareLimit is a shard's LIMIT in a call combined with n-1 others: its
// own divided among them, down to minShare (never above its own). A
// combined call so moves about one shard's full batch in all, and holds
// Redis (a single thread) about as long as one call of its own would,
// not n times as long. A shard that had more due than its share finds
// its next due time already reached, and its mover calls again at once.
func shareLimit(limit, n int) int {
	return min(limit, max(limit/n, minShare))
}
