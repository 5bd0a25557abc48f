package client_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/client"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// lossyProxy forwards TCP to Redis and, while armed, replaces Redis's
// reply to the next script call (EVALSHA) with a LOADING error: the script
// ran, its reply is lost, as when Redis restarts at the wrong moment.
type lossyProxy struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	armed bool
	conns sync.WaitGroup
}

func startLossyProxy(t *testing.T, to string) *lossyProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, to: to}
	var open []net.Conn
	var mu sync.Mutex
	p.conns.Add(1)
	go func() {
		defer p.conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			open = append(open, c, s)
			mu.Unlock()
			p.pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		p.conns.Wait()
	})
	return p
}

func (p *lossyProxy) arm() { p.mu.Lock(); p.armed = true; p.mu.Unlock() }

// pipe copies both ways; a script call seen while armed makes the reply
// that follows it a LOADING error.
func (p *lossyProxy) pipe(c, s net.Conn) {
	var mu sync.Mutex
	inject := false
	p.conns.Add(2)
	go func() {
		defer p.conns.Done()
		defer s.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) {
					p.mu.Lock()
					if p.armed {
						p.armed = false
						mu.Lock()
						inject = true
						mu.Unlock()
					}
					p.mu.Unlock()
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer p.conns.Done()
		defer c.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				out := buf[:n]
				mu.Lock()
				if inject {
					inject = false
					out = []byte("-LOADING Redis is loading the dataset in memory\r\n")
				}
				mu.Unlock()
				if _, werr := c.Write(out); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
}

// An enqueue whose reply is lost after its script ran is retried with the
// same id: a generated id reports success and the task is stored once; a
// caller's id reports ErrDuplicate (it is stored); without retries the
// transient error comes back and the task is stored all the same (the
// outcome was unknown). Both with the Redis client's own retries off and
// on (then the store, allowed go-redis's MaxRetries, sends the call that
// LOADING refused again and sees the duplicate itself).
func TestEnqueueRetriesUnknownOutcome(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	direct := r.Client(t)
	l, _ := shard.NewLayout("hourglass", 16)
	if err := shard.NewStore(direct, l).RegisterQueues(context.Background(), map[string]shard.QueuePolicy{
		"emails": {MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20},
	}); err != nil {
		t.Fatal(err)
	}
	p := startLossyProxy(t, r.Addr)
	ctx := testenv.Ctx(t, 30*time.Second)
	for _, c := range []struct {
		name        string
		redisRetry  int // go-redis MaxRetries: -1 none
		retryFor    time.Duration
		id          string
		wantErr     error // nil or ErrDuplicate
		wantLoading bool  // the first attempt's error comes back
	}{
		{"generated id, client retries", -1, 0, "", nil, false},
		{"caller id, client retries", -1, 0, "order-7", client.ErrDuplicate, false},
		{"generated id, go-redis retries", 3, 0, "", nil, false},
		{"generated id, no retries", -1, client.RetryForNone, "", nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), MaxRetries: c.redisRetry})
			defer rdb.Close()
			cl, err := client.New(rdb, client.Config{RetryFor: c.retryFor})
			if err != nil {
				t.Fatal(err)
			}
			// Load the script first, so the armed call is the enqueue itself.
			if _, err := cl.Enqueue(ctx, client.Task{Queue: "emails", Delay: time.Hour}); err != nil {
				t.Fatal(err)
			}
			p.arm()
			res, err := cl.Enqueue(ctx, client.Task{ID: c.id, Queue: "emails", Delay: time.Hour, Payload: []byte("x")})
			switch {
			case c.wantLoading:
				if err == nil || !strings.Contains(err.Error(), "LOADING") {
					t.Fatalf("enqueue without retries: %v, want the LOADING error", err)
				}
			case c.wantErr == nil && err != nil, c.wantErr != nil && !errors.Is(err, c.wantErr):
				t.Fatalf("enqueue: %v, want %v", err, c.wantErr)
			}
			t.Logf("enqueue after a lost reply: %v", err)
			info, lerr := cl.Lookup(ctx, res.ID)
			if lerr != nil || info.State != client.StateScheduled || string(info.Payload) != "x" {
				t.Fatalf("lookup %q: %+v %v: the first attempt stored the task", res.ID, info, lerr)
			}
		})
	}
}
