package fanout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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

// reconfirmed waits until every recorder heard more confirmations than
// before.
func reconfirmed(t *testing.T, before map[string]int, recs map[string]*recorder) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("a new confirmation on %d channel(s)", len(recs)), func() (bool, string) {
		for ch, r := range recs {
			if _, c := r.payloads(); c <= before[ch] {
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

// TestClusterFollowsSlotMoves: when the slot of a subscribed channel
// moves to another primary, Redis unsubscribes it; the hub subscribes it
// on the new owner (opening a connection there), the listener hears a
// confirmation and then the messages published there, the other channel
// of the old node is not disturbed, and a node left without channels is
// closed.
func TestClusterFollowsSlotMoves(t *testing.T) {
	t.Parallel()
	rc := testenv.StartRedisCluster(t, 3, 0)
	h := New(rc.Client(t), Sharded, nil)
	defer h.Close()
	ctx := testenv.Ctx(t, time.Minute)

	// Two channels of one primary, and another primary to move them to.
	from := rc.PrimaryFor(wakeChannel(0))
	a, b := wakeChannel(0), ""
	for sh := 1; b == ""; sh++ {
		if rc.PrimaryFor(wakeChannel(sh)) == from {
			b = wakeChannel(sh)
		}
	}
	var to *testenv.ClusterNode
	for _, p := range rc.Primaries() {
		if p != from {
			to = p
			break
		}
	}
	ra, rb := &recorder{}, &recorder{}
	defer h.Subscribe(ctx, a, ra.listen).Close()
	defer h.Subscribe(ctx, b, rb.listen).Close()
	both := map[string]*recorder{a: ra, b: rb}
	confirmed(t, 1, both)
	if n := h.Conns(); n != 1 {
		t.Fatalf("%d connections for two channels of one primary, want 1", n)
	}
	for ch, r := range both {
		publish(t, from.Client(t), Sharded, ch, "before")
		received(t, r, ch, "before")
	}
	before := counts(both)

	start := time.Now()
	if err := rc.MigrateSlot(ctx, testenv.KeySlot(a), to); err != nil {
		t.Fatal(err)
	}
	reconfirmed(t, before, map[string]*recorder{a: ra})
	t.Logf("%s subscribed on its new owner %s after the move to it", a, time.Since(start).Round(time.Millisecond))
	publish(t, to.Client(t), Sharded, a, "after the move")
	received(t, ra, a, "after the move")
	if n := h.Conns(); n != 2 {
		t.Fatalf("%d connections for channels on two primaries, want 2", n)
	}
	publish(t, from.Client(t), Sharded, b, "undisturbed")
	received(t, rb, b, "undisturbed")
	undisturbed(t, "the move of another slot", before, map[string]*recorder{b: rb})

	// Move b too: its old node has no channel left and closes.
	if err := rc.MigrateSlot(ctx, testenv.KeySlot(b), to); err != nil {
		t.Fatal(err)
	}
	reconfirmed(t, before, map[string]*recorder{b: rb})
	publish(t, to.Client(t), Sharded, b, "moved too")
	received(t, rb, b, "moved too")
	testenv.WaitFor(t, 10*time.Second, "the emptied node's connection closed", func() (bool, string) {
		n := h.Conns()
		return n == 1, fmt.Sprint(n, " connections")
	})
	if n := subscribers(t, to.Client(t), Sharded, a); n != 1 {
		t.Fatalf("%s has %d subscribed connections on %s, want 1", a, n, to.Addr)
	}

	// A cluster client whose slot map predates a move routes a new
	// channel to its old owner, which answers the SSUBSCRIBE with MOVED:
	// the hub looks the owner up again and subscribes there.
	var c string
	for sh := 1; c == ""; sh++ {
		if ch := wakeChannel(sh); ch != b && rc.PrimaryFor(ch) == from {
			c = ch
		}
	}
	stale := rc.Client(t)
	if err := stale.Ping(ctx).Err(); err != nil { // reads the slot map
		t.Fatal(err)
	}
	if err := rc.MigrateSlot(ctx, testenv.KeySlot(c), to); err != nil {
		t.Fatal(err)
	}
	if addr, err := stale.MasterForKey(ctx, c); err != nil || addr.Options().Addr != from.Addr {
		t.Fatalf("the stale client routes %s to %v (%v), want %s", c, addr, err, from.Addr)
	}
	h2 := New(stale, Sharded, nil)
	defer h2.Close()
	var rc2 recorder
	defer h2.Subscribe(ctx, c, rc2.listen).Close()
	confirmed(t, 1, map[string]*recorder{c: &rc2})
	publish(t, to.Client(t), Sharded, c, "found")
	received(t, &rc2, c, "found")
	testenv.WaitFor(t, 10*time.Second, "the stale owner's connection closed", func() (bool, string) {
		n := h2.Conns()
		return n == 1, fmt.Sprint(n, " connections")
	})
}

// clusterOfChannels starts a cluster of 3 primaries with a replica each,
// subscribes the 16 wake-up channels on a hub made by h and waits for
// their confirmations and a first message. It returns the recorders by
// channel and how many confirmations each heard.
func clusterOfChannels(t *testing.T, h func(*redis.ClusterClient) *Hub) (*testenv.RedisCluster, *Hub, map[string]*recorder, map[string]int) {
	t.Helper()
	rc := testenv.StartRedisCluster(t, 3, 1)
	cc := rc.Client(t)
	hub := h(cc)
	t.Cleanup(hub.Close)
	ctx := testenv.Ctx(t, time.Minute)
	recs := map[string]*recorder{}
	for sh := range 16 {
		ch := wakeChannel(sh)
		recs[ch] = &recorder{}
		t.Cleanup(hub.Subscribe(ctx, ch, recs[ch].listen).Close)
	}
	confirmed(t, 1, recs)
	for ch, r := range recs {
		if err := cc.SPublish(ctx, ch, "first").Err(); err != nil {
			t.Fatal(err)
		}
		received(t, r, ch, "first")
	}
	return rc, hub, recs, counts(recs)
}

// splitBy returns the recorders of victim's channels and of the others'.
func splitBy(rc *testenv.RedisCluster, victim *testenv.ClusterNode, recs map[string]*recorder) (hit, other map[string]*recorder) {
	hit, other = map[string]*recorder{}, map[string]*recorder{}
	for ch, r := range recs {
		if rc.PrimaryFor(ch) == victim {
			hit[ch] = r
		} else {
			other[ch] = r
		}
	}
	return hit, other
}

// afterFailover checks that the channels of a failed primary are served
// by its promoted replica, where each receives a message, and that the
// other channels were not disturbed.
func afterFailover(t *testing.T, rc *testenv.RedisCluster, h *Hub, victim *testenv.ClusterNode, before map[string]int, hit, other map[string]*recorder) {
	t.Helper()
	if err := rc.WaitConsistent(testenv.Ctx(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	for ch, r := range hit {
		owner := rc.PrimaryFor(ch)
		if owner == victim {
			t.Fatalf("%s still served by %s", ch, victim.Addr)
		}
		publish(t, owner.Client(t), Sharded, ch, "on "+owner.Addr)
		received(t, r, ch, "on "+owner.Addr)
	}
	undisturbed(t, "the failover of another primary", before, other)
	if n := h.Conns(); n != 3 {
		t.Errorf("%d connections after the failover, want 3 (one per primary)", n)
	}
}

// TestClusterFollowsFailoverOfKilledPrimary: when a primary is SIGKILLed
// and its replica promoted, its channels' listeners hear a confirmation
// from the promoted replica and then its messages; the other channels are
// not disturbed.
func TestClusterFollowsFailoverOfKilledPrimary(t *testing.T) {
	t.Parallel()
	rc, h, recs, before := clusterOfChannels(t, func(cc *redis.ClusterClient) *Hub { return New(cc, Sharded, nil) })
	victim := rc.PrimaryFor(wakeChannel(0))
	hit, other := splitBy(rc, victim, recs)
	victim.Kill()
	killed := time.Now()
	// Bring the node back at the end (it rejoins as a replica): go-redis's
	// pool keeps a goroutine re-dialling a dead node.
	defer victim.Restart()
	reconfirmed(t, before, hit)
	t.Logf("%d channel(s) subscribed on the promoted replica %s after the SIGKILL", len(hit), time.Since(killed).Round(time.Millisecond))
	afterFailover(t, rc, h, victim, before, hit, other)
}

// TestClusterFollowsFailoverOfPausedPrimary: a SIGSTOPped primary, whose
// socket stays open, is noticed by the health check within
// pingAfter+pongWithin; once its replica is promoted its channels are
// subscribed there. Closing a hub whose node is paused does not hang.
func TestClusterFollowsFailoverOfPausedPrimary(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	log := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	rc, h, recs, before := clusterOfChannels(t, func(cc *redis.ClusterClient) *Hub { return New(cc, Sharded, log) })
	victim := rc.PrimaryFor(wakeChannel(0))
	hit, other := splitBy(rc, victim, recs)

	// A second hub, closed while the node is paused.
	early := New(rc.Client(t), Sharded, nil)
	var r recorder
	early.Subscribe(testenv.Ctx(t, 10*time.Second), wakeChannel(0), r.listen)
	confirmed(t, 1, map[string]*recorder{wakeChannel(0): &r})

	victim.Pause()
	paused := time.Now()
	defer victim.Resume()
	closed := make(chan struct{})
	go func() {
		early.Close()
		close(closed)
	}()
	testenv.WaitFor(t, 5*time.Second, "Close of a hub whose node is paused", func() (bool, string) {
		select {
		case <-closed:
			return true, ""
		default:
			return false, "still closing"
		}
	})

	want := "node=" + victim.Addr + ` error="fanout: no reply to PING"`
	testenv.WaitFor(t, pingAfter+pongWithin+2*time.Second, "the paused node noticed", func() (bool, string) {
		return strings.Contains(logs.String(), want), logs.String()
	})
	t.Logf("paused node given up after %s", time.Since(paused).Round(time.Millisecond))
	reconfirmed(t, before, hit)
	t.Logf("%d channel(s) subscribed on the promoted replica %s after the SIGSTOP", len(hit), time.Since(paused).Round(time.Millisecond))
	afterFailover(t, rc, h, victim, before, hit, other)
}
