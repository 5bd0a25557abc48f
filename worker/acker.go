package worker

import (
	"context"
	"sync"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// ackBatchMax bounds the acknowledgements sent in one round trip.
const ackBatchMax = 256

// acker sends acknowledgements in batches: while one batch is in flight
// the next ones queue up and go together, so under load a round trip
// carries many acks and when idle an ack goes out at once (no timer, no
// added latency). It runs while Run runs; outside it (a manual Ack after
// Run returned) acks go out one by one.
type acker struct {
	store *shard.Store

	mu      sync.RWMutex
	running bool
	ch      chan ackReq
	quit    chan struct{}
	done    chan struct{}
}

type ackReq struct {
	a     shard.AckArgs
	reply chan error
}

func newAcker(store *shard.Store) *acker { return &acker{store: store} }

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

// ack acknowledges one delivery and returns its result.
func (k *acker) ack(ctx context.Context, a shard.AckArgs) error {
	k.mu.RLock()
	if !k.running {
		k.mu.RUnlock()
		return k.store.AckBatch(ctx, []shard.AckArgs{a})[0]
	}
	r := ackReq{a: a, reply: make(chan error, 1)}
	k.ch <- r
	k.mu.RUnlock()
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (k *acker) loop() {
	defer close(k.done)
	batch := make([]ackReq, 0, ackBatchMax)
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
	fill:
		for len(batch) < ackBatchMax {
			select {
			case r := <-k.ch:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		k.send(batch)
	}
}

func (k *acker) send(batch []ackReq) {
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
