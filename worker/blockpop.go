package worker

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// blockingPopper is the popper on one Redis server (standalone, or the
// primary the Sentinels name): one BLMPOP per pop. Each pop in flight
// runs on a connection set aside from the client's pool
// (redis.Client.Conn) whose CLIENT ID was read once, so that another
// connection can end the pop at once with CLIENT UNBLOCK: when the pop's
// ctx ends (shutdown) and on interrupt (the layout changed: the next pop
// covers the shards that exist now). That lets the fetch timeout be long
// (an idle worker sends Redis one command per FetchTimeout) and keeps
// shutdown prompt: go-redis ends a call on its ctx's deadline, not on its
// cancellation. Entries a pop had taken before it was unblocked still
// reach it and are handled as any others (at shutdown, given back). If
// Redis does not answer the CLIENT UNBLOCK, the pop ends at its timeout,
// as every pop did before. A client that is not a *redis.Client (a Ring)
// pops on its pool, each pop ending at its timeout.
type blockingPopper struct {
	store  *shard.Store
	client *redis.Client // nil: no connections of its own
	// name is the client name its connections take (procs.ConnName).
	name string

	mu     sync.Mutex
	idle   []*popConn
	busy   map[*popConn]struct{}
	closed bool
	// pinged is set once a command went through the client's pool. A
	// redis.Conn shares the client's options but not the lock go-redis
	// takes to change them, and go-redis changes them on a connection's
	// first handshake when the server turns down maintenance
	// notifications (Redis before 7.2 does): so the first connection is
	// made through the pool, and the Conns after it find the options
	// settled.
	pinged atomic.Bool
}

// popConn is a connection set aside for blocking pops and its CLIENT ID.
type popConn struct {
	conn *redis.Conn
	id   int64
}

// unblockRetry spaces the CLIENT UNBLOCKs of a pop whose ctx ended while
// it was being sent: the first one may reach Redis before the BLMPOP.
const unblockRetry = 20 * time.Millisecond

func newBlockingPopper(rdb redis.UniversalClient, store *shard.Store, name string) *blockingPopper {
	c, _ := rdb.(*redis.Client)
	return &blockingPopper{store: store, client: c, busy: map[*popConn]struct{}{}, name: name}
}

func (p *blockingPopper) pop(ctx context.Context, ring *readyRing, count int, timeout time.Duration) (string, []string, error) {
	if p.client == nil {
		return p.store.Pop(ctx, ring.rotated(), count, timeout)
	}
	pc, err := p.take(ctx)
	if err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { p.unblock(pc, done) })
	key, entries, err := p.store.PopOn(ctx, pc.conn, ring.rotated(), count, timeout)
	close(done)
	// A connection whose unblock may still be on its way, or whose pop
	// failed (it may be broken), is not used again.
	p.give(pc, stop() && err == nil)
	return key, entries, err
}

// take returns an idle connection, or sets a new one aside.
func (p *blockingPopper) take(ctx context.Context) (*popConn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		pc := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.busy[pc] = struct{}{}
		p.mu.Unlock()
		return pc, nil
	}
	p.mu.Unlock()
	if !p.pinged.Load() {
		if err := p.client.Ping(ctx).Err(); err != nil {
			return nil, err
		}
		p.pinged.Store(true)
	}
	conn := p.client.Conn()
	var idc *redis.IntCmd
	_, _ = conn.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if p.name != "" {
			// The process registry's liveness; a refusal (an ACL user
			// without "client|setname") leaves the connection unnamed.
			pipe.ClientSetName(ctx, p.name)
		}
		idc = pipe.ClientID(ctx)
		return nil
	})
	id, err := idc.Result()
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	pc := &popConn{conn: conn, id: id}
	p.mu.Lock()
	p.busy[pc] = struct{}{}
	p.mu.Unlock()
	return pc, nil
}

// give takes pc back: kept for the next pop, or closed.
func (p *blockingPopper) give(pc *popConn, keep bool) {
	p.mu.Lock()
	delete(p.busy, pc)
	keep = keep && !p.closed
	if keep {
		p.idle = append(p.idle, pc)
	}
	p.mu.Unlock()
	if !keep {
		_ = pc.conn.Close()
	}
}

// unblock ends pc's pop: it sends CLIENT UNBLOCK until one finds the pop
// blocked, the pop is done, or Redis does not answer.
func (p *blockingPopper) unblock(pc *popConn, done <-chan struct{}) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		ok, err := p.store.Unblock(ctx, pc.id)
		cancel()
		if ok || err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(unblockRetry):
		}
	}
}

// interrupt ends the pops in flight once, at once (best effort): their
// fetch loops pop again, with the keys of the current layout.
func (p *blockingPopper) interrupt() {
	p.mu.Lock()
	ids := make([]int64, 0, len(p.busy))
	for pc := range p.busy {
		ids = append(ids, pc.id)
	}
	p.mu.Unlock()
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		_, _ = p.store.Unblock(ctx, id)
		cancel()
	}
}

// close closes the idle connections; the fetch loops have returned, so
// none is busy.
func (p *blockingPopper) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, pc := range idle {
		_ = pc.conn.Close()
	}
}
