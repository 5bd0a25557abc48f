package worker

import (
	"context"
	"sync"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ackBatchMax bounds the acknowledgements sent in one round trip.
const ackBatchMax = 256

// acker sends acknowledgements in batches. Once an ack is queued it
// waits up to linger for more to share its round trip (and while one
// batch is in flight the next ones queue up), so a steady trickle of
// tasks costs Redis one ack round trip per linger instead of one per
// task. An urgent ack (its delivery still holds a slot or a flow-control
// permit that the ack frees) sends the batch at once, and so does a full
// batch. It runs while Run runs; outside it (a manual Ack after Run
// returned) acks go out one by one.
type acker struct {
	store  *shard.Store
	linger time.Duration // <= 0: no waiting
	// sent, if set, sees the size of every batch sent (a test hook).
	sent func(n int)

	mu      sync.RWMutex
	running bool
	ch      chan ackReq
	quit    chan struct{}
	done    chan struct{}
}

type ackReq struct {
	a      shard.AckArgs
	urgent bool
	reply  chan error
}

func newAcker(store *shard.Store, linger time.Duration) *acker {
	return &acker{store: store, linger: linger}
}

// start launches the batching goroutine; stop ends it.
func (k *acker) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.ch = make(chan ackReq, ackBatchMax)
	k.quit = make(chan struct{})
	k.done = make(chan struct{})
	k.running = true
	go k.loop()
}

// stop ends the batching goroutine after it has sent every queued ack.
func (k *acker) stop() {
	k.mu.Lock()
	if !k.running {
		k.mu.Unlock()
		return
	}
	k.running = false
	k.mu.Unlock() // no sender holds the read lock now: all sends are queued
	close(k.quit)
	<-k.done
}

// ack acknowledges one delivery and returns its result; the batch that
// carries it is bounded by opTimeout, so a ctx without a deadline does
// not wait forever. urgent sends it without lingering.
func (k *acker) ack(ctx context.Context, a shard.AckArgs, urgent bool) error {
	select {
	case err := <-k.submit(ctx, a, urgent):
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// submit hands a to the batching loop (outside Run: sends it at once);
// its result arrives on the returned channel.
func (k *acker) submit(ctx context.Context, a shard.AckArgs, urgent bool) <-chan error {
	reply := make(chan error, 1)
	k.mu.RLock()
	if !k.running {
		k.mu.RUnlock()
		ctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		reply <- k.store.AckBatch(ctx, []shard.AckArgs{a})[0]
		return reply
	}
	k.ch <- ackReq{a: a, urgent: urgent, reply: reply}
	k.mu.RUnlock()
	return reply
}

func (k *acker) loop() {
	defer close(k.done)
	batch := make([]ackReq, 0, ackBatchMax)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case r := <-k.ch:
			batch = append(batch[:0], r)
		case <-k.quit:
			for { // send what is queued, then stop
				select {
				case r := <-k.ch:
					k.send([]ackReq{r})
				default:
					return
				}
			}
		}
		wait := k.linger > 0 && !batch[0].urgent
		if wait {
			timer.Reset(k.linger)
		}
	fill:
		for len(batch) < ackBatchMax {
			if !wait {
				select {
				case r := <-k.ch:
					batch = append(batch, r)
				default:
					break fill
				}
				continue
			}
			select {
			case r := <-k.ch:
				batch = append(batch, r)
				wait = !r.urgent
			case <-timer.C:
				wait = false
			case <-k.quit:
				wait = false // stopping: send now; the loop's top drains the rest
			}
		}
		timer.Stop()
		k.send(batch)
	}
}

func (k *acker) send(batch []ackReq) {
	if k.sent != nil {
		k.sent(len(batch))
	}
	args := make([]shard.AckArgs, len(batch))
	for i, r := range batch {
		args[i] = r.a
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for i, err := range k.store.AckBatch(ctx, args) {
		batch[i].reply <- err
	}
}
