package fanout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder collects a listener's events.
type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) listen(e Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// payloads returns the messages received so far and how many
// confirmations.
func (r *recorder) payloads() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	subs := 0
	for _, e := range r.events {
		if e.Subscribed {
			subs++
		} else {
			out = append(out, e.Payload)
		}
	}
	return out, subs
}

// subscribers returns how many connections Redis counts on channel.
func subscribers(t *testing.T, rdb *redis.Client, kind Kind, channel string) int64 {
	t.Helper()
	ctx := context.Background()
	var m map[string]int64
	var err error
	if kind == Sharded {
		m, err = rdb.PubSubShardNumSub(ctx, channel).Result()
	} else {
		m, err = rdb.PubSubNumSub(ctx, channel).Result()
	}
	if err != nil {
		t.Fatal(err)
	}
	return m[channel]
}

func publish(t *testing.T, rdb *redis.Client, kind Kind, channel, msg string) {
	t.Helper()
	var err error
	if kind == Sharded {
		err = rdb.SPublish(context.Background(), channel, msg).Err()
	} else {
		err = rdb.Publish(context.Background(), channel, msg).Err()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestSharesOneConnection: listeners of many channels share one
// connection; each channel is subscribed once however many listeners it
// has; each listener gets the confirmation, then its channel's messages;
// the last listener of a channel unsubscribes it and the last channel
// closes the connection.
func TestSharesOneConnection(t *testing.T) {
	for _, kind := range []Kind{Classic, Sharded} {
		t.Run(fmt.Sprint("kind ", kind), func(t *testing.T) {
			t.Parallel()
			rdb := testenv.StartRedis(t).Client(t)
			h := New(rdb, kind, nil)
			defer h.Close()
			ctx := testenv.Ctx(t, 30*time.Second)
			var a1, a2, b recorder
			sa1 := h.Subscribe(ctx, "{a}:wake", a1.listen)
			sa2 := h.Subscribe(ctx, "{a}:wake", a2.listen)
			sb := h.Subscribe(ctx, "{b}:wake", b.listen)
			if n := h.Conns(); n != 1 {
				t.Fatalf("%d connections for 3 subscriptions, want 1", n)
			}
			testenv.WaitFor(t, 10*time.Second, "subscriptions confirmed", func() (bool, string) {
				_, c1 := a1.payloads()
				_, c2 := a2.payloads()
				_, c3 := b.payloads()
				return c1 >= 1 && c2 >= 1 && c3 >= 1, fmt.Sprint(c1, c2, c3)
			})
			if n := subscribers(t, rdb, kind, "{a}:wake"); n != 1 {
				t.Fatalf("{a}:wake has %d subscribed connections, want 1", n)
			}
			publish(t, rdb, kind, "{a}:wake", "1")
			publish(t, rdb, kind, "{b}:wake", "2")
			testenv.WaitFor(t, 10*time.Second, "messages delivered", func() (bool, string) {
				p1, _ := a1.payloads()
				p2, _ := a2.payloads()
				p3, _ := b.payloads()
				return fmt.Sprint(p1, p2, p3) == "[1] [1] [2]", fmt.Sprint(p1, p2, p3)
			})

			sa1.Close()
			sa1.Close() // idempotent
			publish(t, rdb, kind, "{a}:wake", "3")
			testenv.WaitFor(t, 10*time.Second, "the open listener still gets messages", func() (bool, string) {
				p2, _ := a2.payloads()
				return fmt.Sprint(p2) == "[1 3]", fmt.Sprint(p2)
			})
			if p1, _ := a1.payloads(); fmt.Sprint(p1) != "[1]" {
				t.Fatalf("closed listener got %v", p1)
			}
			sa2.Close()
			testenv.WaitFor(t, 10*time.Second, "{a}:wake unsubscribed", func() (bool, string) {
				n := subscribers(t, rdb, kind, "{a}:wake")
				return n == 0, fmt.Sprint(n)
			})
			sb.Close()
			if n := h.Conns(); n != 0 {
				t.Fatalf("%d connections open after the last subscription closed", n)
			}
		})
	}
}

// TestLateListenerIsConfirmed: a listener that joins a channel whose
// subscription was confirmed before it joined still hears a
// confirmation of its own (it re-checks on it).
func TestLateListenerIsConfirmed(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	h := New(rdb, Classic, nil)
	defer h.Close()
	ctx := testenv.Ctx(t, 30*time.Second)
	var early, late recorder
	defer h.Subscribe(ctx, "c", early.listen).Close()
	testenv.WaitFor(t, 10*time.Second, "the first listener confirmed", func() (bool, string) {
		_, c := early.payloads()
		return c == 1, fmt.Sprint(c)
	})
	defer h.Subscribe(ctx, "c", late.listen).Close()
	testenv.WaitFor(t, 10*time.Second, "the late listener confirmed", func() (bool, string) {
		_, c := late.payloads()
		return c == 1, fmt.Sprint(c)
	})
	if n := subscribers(t, rdb, Classic, "c"); n != 1 {
		t.Fatalf("c has %d subscribed connections, want 1", n)
	}
}

// TestResubscribeAfterLastClose: a channel whose last listener closes and
// which is subscribed again at once, many times over and from several
// goroutines, ends up subscribed: the UNSUBSCRIBE of one round never
// lands after the SUBSCRIBE of the next.
func TestResubscribeAfterLastClose(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	h := New(rdb, Sharded, nil)
	defer h.Close()
	ctx := testenv.Ctx(t, 30*time.Second)
	keep := h.Subscribe(ctx, "{keep}:wake", func(Event) {}) // holds the connection open
	defer keep.Close()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				h.Subscribe(ctx, "{s}:wake", func(Event) {}).Close()
			}
		}()
	}
	wg.Wait()
	var r recorder
	s := h.Subscribe(ctx, "{s}:wake", r.listen)
	defer s.Close()
	testenv.WaitFor(t, 10*time.Second, "a message after the churn", func() (bool, string) {
		publish(t, rdb, Sharded, "{s}:wake", "x")
		p, _ := r.payloads()
		return len(p) > 0, fmt.Sprintf("subscribed connections %d", subscribers(t, rdb, Sharded, "{s}:wake"))
	})
}

// TestReconfirmsAfterRestart: after Redis restarts, go-redis reconnects
// and subscribes again, and the listener hears the confirmation (it must
// re-check what it waits for) and later messages.
func TestReconfirmsAfterRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client(t)
	h := New(rdb, Sharded, nil)
	defer h.Close()
	var r recorder
	s := h.Subscribe(testenv.Ctx(t, 30*time.Second), "{r}:wake", r.listen)
	defer s.Close()
	testenv.WaitFor(t, 10*time.Second, "first confirmation", func() (bool, string) {
		_, c := r.payloads()
		return c == 1, fmt.Sprint(c)
	})
	srv.Kill()
	srv.Restart()
	testenv.WaitFor(t, 20*time.Second, "confirmation after the restart, then a message", func() (bool, string) {
		_, c := r.payloads()
		if c >= 2 {
			publish(t, rdb, Sharded, "{r}:wake", "back")
		}
		p, _ := r.payloads()
		return len(p) > 0 && p[len(p)-1] == "back", fmt.Sprintf("%d confirmations, messages %v", c, p)
	})
}

// TestSignalCoalesces: Signal's channel holds one pending signal however
// many events arrive, and observe sees each of them.
func TestSignalCoalesces(t *testing.T) {
	t.Parallel()
	rdb := testenv.StartRedis(t).Client(t)
	h := New(rdb, Classic, nil)
	defer h.Close()
	var seen recorder
	ch, stop := h.Signal(testenv.Ctx(t, 30*time.Second), "c", seen.listen)
	defer stop()
	testenv.WaitFor(t, 10*time.Second, "confirmation", func() (bool, string) {
		_, c := seen.payloads()
		return c == 1, ""
	})
	for i := 0; i < 5; i++ {
		publish(t, rdb, Classic, "c", fmt.Sprint(i))
	}
	testenv.WaitFor(t, 10*time.Second, "five messages observed", func() (bool, string) {
		p, _ := seen.payloads()
		return len(p) == 5, fmt.Sprint(p)
	})
	if n := len(ch); n != 1 {
		t.Fatalf("%d signals pending, want 1 (bursts coalesce)", n)
	}
}

// TestRingRoutesPerChannel: on a Ring each channel gets a connection of
// its own (the Ring picks a shard by the channel's name).
func TestRingRoutesPerChannel(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr}})
	defer ring.Close()
	h := New(ring, Classic, nil)
	defer h.Close()
	ctx := testenv.Ctx(t, 30*time.Second)
	s1 := h.Subscribe(ctx, "one", func(Event) {})
	s2 := h.Subscribe(ctx, "two", func(Event) {})
	if n := h.Conns(); n != 2 {
		t.Fatalf("%d connections for two channels on a Ring, want 2", n)
	}
	s1.Close()
	s2.Close()
	if n := h.Conns(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

// TestRingWithoutLiveShard: a Ring whose shards are all down makes
// go-redis panic on Subscribe; the hub logs it instead, and the listener
// hears nothing until it subscribes again.
func TestRingWithoutLiveShard(t *testing.T) {
	t.Parallel()
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:              map[string]string{"a": fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))},
		HeartbeatFrequency: 10 * time.Millisecond,
	})
	defer ring.Close()
	testenv.WaitFor(t, 10*time.Second, "the Ring marks its shard down", func() (bool, string) {
		err := ring.Ping(context.Background()).Err()
		return err != nil && strings.Contains(err.Error(), "all ring shards are down"), fmt.Sprint(err)
	})
	h := New(ring, Classic, nil)
	defer h.Close()
	s := h.Subscribe(testenv.Ctx(t, 10*time.Second), "c", func(Event) { t.Error("event without a connection") })
	s.Close()
	if n := h.Conns(); n != 0 {
		t.Fatalf("%d connections left", n)
	}
}

// wakeChannel is shard sh's wake-up channel, as internal/scan names it.
func wakeChannel(sh int) string { return fmt.Sprintf("{hourglass:%d}:wake", sh) }

// confirmed waits until every recorder heard at least want confirmations.
func confirmed(t *testing.T, want int, recs map[string]*recorder) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d confirmation(s) on %d channel(s)", want, len(recs)), func() (bool, string) {
		for ch, r := range recs {
			if _, c := r.payloads(); c < want {
				return false, fmt.Sprintf("%s: %d", ch, c)
			}
		}
		return true, ""
	})
}

// counts returns how many confirmations each recorder heard.
func counts(recs map[string]*recorder) map[string]int {
	out := map[string]int{}
	for ch, r := range recs {
		_, out[ch] = r.payloads()
	}
	return out
}

// undisturbed checks that no recorder heard a confirmation since before.
func undisturbed(t *testing.T, what string, before map[string]int, recs map[string]*recorder) {
	t.Helper()
	for ch, r := range recs {
		if _, c := r.payloads(); c != before[ch] {
			t.Errorf("%s heard %d confirmation(s), %d before %s; it should not be touched", ch, c, before[ch], what)
		}
	}
}

// received waits until r's last message is msg.
func received(t *testing.T, r *recorder, channel, msg string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, fmt.Sprintf("%q on %s", msg, channel), func() (bool, string) {
		p, _ := r.payloads()
		return len(p) > 0 && p[len(p)-1] == msg, fmt.Sprint(p)
	})
}

// TestClusterRoutesShardedPerNode: on a Redis Cluster, the sharded
// channels of 16 shards share one connection per primary that owns one of
// their slots, each channel subscribed once on its owner, so a message
// SPUBLISHed in any slot reaches its listener (and only it); a channel's
// listeners coming and going do not disturb the others; classic channels
// share one connection.
func TestClusterRoutesShardedPerNode(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	cc := rc.Client(t)
	h := New(cc, Sharded, nil)
	defer h.Close()
	ctx := testenv.Ctx(t, time.Minute)
	const shards = 16
	recs := map[string]*recorder{}
	var subs []*Subscription
	owners := map[string]*redis.Client{}
	for sh := range shards {
		ch := wakeChannel(sh)
		owner := rc.PrimaryFor(ch)
		if owners[owner.Addr] == nil {
			owners[owner.Addr] = owner.Client(t)
		}
		recs[ch] = &recorder{}
		subs = append(subs, h.Subscribe(ctx, ch, recs[ch].listen))
	}
	if len(owners) < 2 {
		t.Fatalf("the channels' slots are on %d primary(ies); the test needs several", len(owners))
	}
	if n := h.Conns(); n != len(owners) {
		t.Fatalf("%d connections for %d channels on %d primaries, want one per primary", n, shards, len(owners))
	}
	confirmed(t, 1, recs)
	for ch := range recs {
		if n := subscribers(t, owners[rc.PrimaryFor(ch).Addr], Sharded, ch); n != 1 {
			t.Fatalf("%s has %d subscribed connections on its owner, want 1", ch, n)
		}
		if err := cc.SPublish(ctx, ch, ch).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for ch, r := range recs {
		received(t, r, ch, ch)
	}
	// Every confirmation of the subscriptions arrived before these
	// messages (a listener may hear two: the one of the session that
	// opened the node's connection and the one of its own SSUBSCRIBE).
	before := counts(recs)

	// Churn on one more channel, on the node of shard 0: its last
	// SUNSUBSCRIBE never lands after its next SSUBSCRIBE, and the node's
	// other channels hear nothing of it.
	churn := "{hourglass:0}:churn"
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 25 {
				h.Subscribe(ctx, churn, func(Event) {}).Close()
			}
		})
	}
	wg.Wait()
	var rch recorder
	defer h.Subscribe(ctx, churn, rch.listen).Close()
	testenv.WaitFor(t, 10*time.Second, "a message after the churn", func() (bool, string) {
		if err := cc.SPublish(ctx, churn, "x").Err(); err != nil {
			t.Fatal(err)
		}
		p, _ := rch.payloads()
		return len(p) > 0, fmt.Sprint(p)
	})
	undisturbed(t, "the churn", before, recs)
	for ch, r := range recs {
		if p, _ := r.payloads(); fmt.Sprint(p) != "["+ch+"]" {
			t.Errorf("%s heard %v, want [%s]", ch, p, ch)
		}
	}
	for _, s := range subs {
		s.Close()
	}
	if n := h.Conns(); n != 1 {
		t.Fatalf("%d connections with one channel left, want 1", n)
	}

	classic := New(cc, Classic, nil)
	defer classic.Close()
	defer classic.Subscribe(ctx, "a", func(Event) {}).Close()
	defer classic.Subscribe(ctx, "b", func(Event) {}).Close()
	if n := classic.Conns(); n != 1 {
		t.Fatalf("%d connections for two classic channels on a cluster, want 1", n)
	}
}
