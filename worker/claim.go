package worker

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// claimAsync reserves a slot per popped entry, starts the handlers of
// those it may run before leasing them (see QueueOptions.LeaseAfter) and
// claims the others in the background, so the fetch loop can pop again
// while the claim is in flight. Run waits for run.claims before it waits
// for the handlers. sent is when the pop was sent: entries whose pop is
// older than shard.MaxLeaseAfter (the pop blocked that long, or the
// process was paused) are leased first, since recovery may have taken
// them back already.
func (w *Worker) claimAsync(ctx context.Context, key string, entries []string, sent time.Time, run *runState) {
	q, sh, ok := w.poppedFrom(key, len(entries))
	if !ok {
		return
	}
	if q.fair.Load() {
		w.refillAsync(ctx, q, sh, run)
	}
	fresh := w.deps.now().Sub(sent) <= shard.MaxLeaseAfter
	refs := make([]string, 0, len(entries))
	for _, e := range entries {
		if fresh && q.opts.LeaseAfter > 0 {
			if sd, ok := w.deps.store.Popped(sh, e, sent, q.opts.Lease); ok {
				run.start(ctx, newDelivery(w.deps, q, sd, sd.Leased))
				continue
			}
		}
		// Lease first: the queue asks for it, the pop is too old to run
		// the entry unleased, or the entry does not carry a task this
		// binary can read (claim.lua decides about those).
		refs = append(refs, shard.EntryRef(e))
	}
	if len(refs) == 0 {
		return
	}
	run.claims.Add(1)
	go func() {
		defer run.claims.Done()
		w.claim(ctx, q, sh, refs, sent, run)
	}()
}

// refillAsync asks for the window of fair queue q in shard sh, which a
// pop just took entries from, to be refilled from its keys' lists
// (Store.FairRefill), in the background: the window is refilled at the
// pace workers take from it. Pops that overlap share refills: while one
// is in flight, the pops meanwhile ask for one more after it (a refill
// tops the window up to its size, so one covers every pop before it
// started). A refill that fails is left to the next pop, the mover and
// the recovery pass, which refill it too.
func (w *Worker) refillAsync(ctx context.Context, q *queue, sh int, run *runState) {
	v, _ := q.refills.LoadOrStore(sh, new(atomic.Int32))
	st := v.(*atomic.Int32)
	for {
		switch st.Load() {
		case 0:
			if !st.CompareAndSwap(0, 1) {
				continue
			}
		case 1:
			if !st.CompareAndSwap(1, 2) {
				continue
			}
			return
		default:
			return // one more is asked for already
		}
		break
	}
	run.claims.Add(1)
	go func() {
		defer run.claims.Done()
		for {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
			_, err := w.deps.store.FairRefill(rctx, sh, q.name)
			cancel()
			if err != nil {
				w.deps.log.Warn("could not refill a fair queue's window; the next pop or the scheduler will", "queue", q.name, "shard", sh, "error", err)
			}
			if st.CompareAndSwap(1, 0) {
				return
			}
			st.Store(1) // it was 2: pops came meanwhile
		}
	}()
}

// poppedFrom returns the queue and shard of the ready list key that n
// entries were popped from, and reserves a slot of the queue for each.
func (w *Worker) poppedFrom(key string, n int) (*queue, int, bool) {
	sh, qname, ok := w.deps.store.Layout().ParseReady(key)
	q := w.queue(qname)
	if !ok || q == nil {
		w.deps.log.Error("popped from an unexpected key; ids left for recovery", "key", key, "ids", n)
		return nil, 0, false
	}
	q.reserve(n)
	return q, sh, true
}

// claim leases popped entries and starts their handlers (if the worker is
// shutting down, start gives them straight back); it returns the
// deliveries it started.
func (w *Worker) claim(ctx context.Context, q *queue, sh int, refs []string, poppedAt time.Time, run *runState) []*delivery {
	// The caller reserved one slot per popped entry; each entry that does
	// not become a running handler gives its slot back.
	unreserve := len(refs)
	defer func() {
		if unreserve > 0 {
			q.release(unreserve)
		}
	}()
	ds, sent, err := claimPopped(w.deps.store, poppedAt, sh, q.name, refs, q.opts.Lease)
	if err != nil {
		w.deps.met.fetchErrs.Inc()
		w.deps.log.Warn("claim failed; recovery will take the ids back, counting an attempt", "error", err, "shard", sh, "queue", q.name, "ids", len(refs))
		return nil
	}
	if n := len(refs) - len(ds); n > 0 {
		// No longer pending under the popped entries' numbers: cancelled,
		// or taken back by recovery while this worker was paused.
		q.met.dropped.Add(float64(n))
		w.deps.log.Warn("popped tasks no longer ours; dropped without running", "shard", sh, "queue", q.name, "ids", n)
	}
	started := make([]*delivery, 0, len(ds))
	for _, sd := range ds {
		d := newDelivery(w.deps, q, sd, sent)
		unreserve-- // the delivery's finish frees this slot
		if err := sd.DecodeErr; err != nil {
			// Data this binary cannot read: never run it, dead-letter
			// it. A queue name that could not be read (Redis did not
			// answer) is not the data's fault: a failed attempt, retried.
			if errors.Is(err, shard.ErrUndecodable) {
				err = NoRetry(err)
			}
			_ = d.finish(context.Background(), err)
			continue
		}
		run.start(ctx, d)
		started = append(started, d)
	}
	return started
}

// claimPopped leases entries popped at poppedAt (their "seq|id"
// references), retrying a failed claim while the ids are surely still
// this worker's: recovery takes popped, unleased ids back no sooner than
// shard.UnleasedGrace after the pop, and a retried claim of an entry
// already leased returns that lease. The first attempt is made however
// old the pop: Redis decides, and leases only entries still pending under
// their numbers. sent is the first attempt's time: Redis started the
// leases no earlier. The lease-first path, the late lease of a running
// task (watchdog.go) and the lease of a stale one before it starts
// (delivery.go) use it.
func claimPopped(store *shard.Store, poppedAt time.Time, sh int, queue string, refs []string, lease time.Duration) (ds []shard.Delivery, sent time.Time, err error) {
	sent = time.Now()
	until := poppedAt.Add(shard.UnleasedGrace - shard.LeaseMargin)
	first := until
	if f := sent.Add(shard.UnleasedGrace - shard.LeaseMargin); f.After(first) {
		first = f
	}
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		ctx, cancel := context.WithDeadline(context.Background(), first)
		first = until
		ds, err = store.Claim(ctx, sh, queue, refs, lease)
		cancel()
		if err == nil || time.Now().Add(wait).After(until) {
			return ds, sent, err
		}
		time.Sleep(wait)
	}
}
