package election

import (
	"context"
	"time"
)

// The RunFuncs of won shards: started when a shard is won, cancelled and
// waited for when it is lost or released.

// shardRun is one running RunFunc.
type shardRun struct {
	shard  int
	epoch  int64
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when RunFunc has returned
}

func (r *shardRun) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// start runs RunFunc for a shard just won.
func (m *Manager) start(s *session, shard int, epoch int64) {
	ctx, cancel := context.WithCancel(s.ctx)
	r := &shardRun{shard: shard, epoch: epoch, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	// Logged before Owned reports it, so that a reader that sees the
	// shard owned finds the line.
	m.log.Info("acquired shard", "shard", shard, "epoch", epoch)
	m.mu.Lock()
	m.runs[shard] = r
	m.met.owned.Set(float64(len(m.runs)))
	m.mu.Unlock()
	m.met.changes.WithLabelValues(changeAcquired).Inc()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.run(ctx, shard, epoch)
		close(r.done)
		m.poke()
	}()
}

// removeRun forgets a RunFunc that has returned.
func (m *Manager) removeRun(r *shardRun, change string) {
	r.cancel()
	m.mu.Lock()
	delete(m.runs, r.shard)
	m.met.owned.Set(float64(len(m.runs)))
	m.mu.Unlock()
	m.met.changes.WithLabelValues(change).Inc()
}

// wait waits for a cancelled RunFunc to return, with a warning if it
// takes longer than the self-fencing margin.
func (m *Manager) wait(r *shardRun) {
	select {
	case <-r.done:
		return
	case <-time.After(m.cfg.margin()):
	}
	m.log.Warn("shard work slow to stop after cancel", "shard", r.shard, "epoch", r.epoch)
	<-r.done
}
