package fanout

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/keyslot"
)

// A primary's connection on a Redis Cluster: its loop, sessions, health
// checks, and the re-routing of channels whose slot moved. nodeSet
// (cluster.go) routes the channels to the nodes.

// halt cancels n's loop and closes its PubSub, which ends a read in
// progress at once. A dial in progress ends at once if the node refuses
// or does not accept the connection (ctx), but one to a node that accepts
// it without answering (paused) ends only with the client's DialTimeout
// (5 s by default), and so may Close: that is the longest a Subscription's
// or the Hub's Close waits for.
func (n *node) halt() {
	n.cancel()
	n.mu.Lock()
	ps := n.ps
	n.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
}

// stop halts n and waits for its loop and background SUNSUBSCRIBEs.
func (n *node) stop() {
	n.halt()
	<-n.done
	n.pending.Wait()
}

// run is n's loop: a session on a connection, then, once it failed, a
// backoff, a new look-up of each channel's owner (which may hand some or
// all of them to other nodes) and the next session, until n is stopped or
// has no channel left.
func (n *node) run() {
	defer n.ns.wg.Done()
	defer close(n.done)
	wait := backoff.Backoff{Max: retryMax}
	for {
		heard, err := n.session()
		if n.ctx.Err() != nil || errors.Is(err, errRetired) {
			return
		}
		if heard {
			wait.Reset()
		}
		n.ns.log.Warn("sharded pub/sub connection failed; subscribing again", "node", n.addr, "error", err)
		n.ns.cc.ReloadState(n.ctx) // in the background; the backoff gives it time
		wait.Wait(n.ctx)
		if n.ctx.Err() != nil || !n.resolve() {
			return
		}
	}
}

// resolve looks up the owner of each of n's channels and moves those
// that belong elsewhere. It reports whether n has channels left.
func (n *node) resolve() bool {
	for _, ch := range n.ns.channelsOf(n) {
		addr, client := n.ns.owner(n.ctx, ch)
		switch {
		case addr == "": // no answer: stay, try again after the next session
		case addr == n.addr:
			n.client = client // the cluster client may have replaced its client of addr
		default:
			if to := n.ns.move(ch, n, addr, client); to != nil {
				to.subscribe(to.ctx, ch)
			}
		}
	}
	return !n.ns.retire(n)
}

// session opens a PubSub on n's node, subscribes every channel of n,
// each with its own SSUBSCRIBE, and reads it until it fails. heard
// reports whether the node answered.
func (n *node) session() (heard bool, err error) {
	if n.client == nil {
		return false, errNoOwner
	}
	ps := n.client.SSubscribe(context.Background()) // no channel: no I/O yet
	defer func() {
		n.mu.Lock()
		n.ps = nil
		n.mu.Unlock()
		_ = ps.Close()
	}()
	if err := n.subscribeAll(ps); err != nil {
		return false, err
	}
	return n.receive(ps)
}

// subscribeAll makes ps n's PubSub and subscribes n's channels on it,
// under io: a channel routed to n meanwhile is subscribed either here or,
// afterwards, by its own SSUBSCRIBE on ps. The first SSUBSCRIBE dials: a
// node that accepts the connection but does not answer (paused) holds it
// for the client's DialTimeout (measured: 5 s, the default, whatever the
// ctx deadline).
func (n *node) subscribeAll(ps *redis.PubSub) error {
	n.io.Lock()
	defer n.io.Unlock()
	n.mu.Lock()
	if n.ctx.Err() != nil { // halted: ps would not be closed by halt
		n.mu.Unlock()
		return n.ctx.Err()
	}
	n.ps = ps
	n.mu.Unlock()
	for _, ch := range n.ns.channelsOf(n) {
		ctx, cancel := context.WithTimeout(n.ctx, sendTimeout)
		err := ps.SSubscribe(ctx, ch)
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// subscribe sends channel's SSUBSCRIBE on n's current PubSub if the
// channel is routed to n; between sessions it does nothing (the next
// session subscribes it). A failed write ends the session: go-redis has
// reconnected the PubSub by then and re-sent its channels in one
// command, so it is not used any more.
func (n *node) subscribe(ctx context.Context, channel string) {
	n.io.Lock()
	defer n.io.Unlock()
	if !n.ns.assigned(channel, n) {
		return
	}
	n.mu.Lock()
	ps := n.ps
	n.mu.Unlock()
	if ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	if err := ps.SSubscribe(ctx, channel); err != nil {
		n.ns.log.Warn("subscribe failed; reconnecting", "node", n.addr, "channel", channel, "error", err)
		_ = ps.Close()
	}
}

// unsubscribe sends channel's SUNSUBSCRIBE unless it was subscribed
// again meanwhile. Best effort: a failed unsubscribe only costs ignored
// messages (and a new session, as for subscribe).
func (n *node) unsubscribe(channel string) {
	n.io.Lock()
	defer n.io.Unlock()
	if n.ns.assigned(channel, n) {
		return
	}
	n.mu.Lock()
	ps := n.ps
	n.mu.Unlock()
	if ps == nil {
		return
	}
	ctx, cancel := context.WithTimeout(n.ctx, sendTimeout)
	defer cancel()
	if err := ps.SUnsubscribe(ctx, channel); err != nil {
		_ = ps.Close()
	}
}

// strays are the channels of a session that Redis unsubscribed (their
// slot moved) or refused with MOVED or ASK: each is looked up again at
// due, after a backoff that a confirmation resets.
type strays struct {
	chans map[string]struct{}
	due   time.Time
	wait  backoff.Backoff
}

func (s *strays) add(now time.Time, chans ...string) {
	if len(chans) == 0 {
		return
	}
	if len(s.chans) == 0 {
		s.due = now.Add(s.wait.Next())
	}
	for _, ch := range chans {
		s.chans[ch] = struct{}{}
	}
}

// receive reads ps and delivers its events until it fails, health
// checking it (pingAfter, pongWithin) and re-routing strays.
func (n *node) receive(ps *redis.PubSub) (heard bool, err error) {
	last := time.Now() // when the node last sent something
	var pinged time.Time
	st := strays{chans: map[string]struct{}{}, wait: backoff.Backoff{Max: retryMax}}
	for {
		deadline := last.Add(pingAfter)
		if !pinged.IsZero() {
			deadline = pinged.Add(pongWithin)
		}
		if len(st.chans) > 0 && st.due.Before(deadline) {
			deadline = st.due
		}
		msg, err := ps.ReceiveTimeout(n.ctx, max(time.Until(deadline), time.Millisecond))
		now := time.Now()
		switch slot, redirected := redirection(err); {
		case err == nil:
			heard, last, pinged = true, now, time.Time{}
			n.handle(msg, now, &st)
		case redirected: // an SSUBSCRIBE reached a node that no longer owns the slot
			heard, last, pinged = true, now, time.Time{}
			n.ns.cc.ReloadState(n.ctx)
			st.add(now, n.channelsOfSlot(slot)...)
		case !isTimeout(err):
			return heard, err
		}
		if len(st.chans) > 0 && !now.Before(st.due) {
			if err := n.reroute(&st); err != nil {
				return heard, err
			}
		}
		switch {
		case !pinged.IsZero() && !now.Before(pinged.Add(pongWithin)):
			return heard, errNoPong
		case pinged.IsZero() && !now.Before(last.Add(pingAfter)):
			if err := ps.Ping(n.ctx); err != nil {
				return heard, err
			}
			pinged = now
		}
	}
}

// handle delivers one thing read from n's connection.
func (n *node) handle(msg any, now time.Time, st *strays) {
	switch m := msg.(type) {
	case *redis.Message:
		n.ns.send(n, m.Channel, Event{Payload: m.Payload})
	case *redis.Subscription:
		switch m.Kind {
		case "ssubscribe":
			delete(st.chans, m.Channel)
			st.wait.Reset()
			n.ns.send(n, m.Channel, Event{Subscribed: true})
		case "sunsubscribe":
			// Redis unsubscribed a channel with listeners: its slot
			// moved (or this confirms a SUNSUBSCRIBE of a channel
			// subscribed again since, and the look-up finds it here).
			if n.ns.assigned(m.Channel, n) {
				n.ns.cc.ReloadState(n.ctx)
				st.add(now, m.Channel)
			}
		}
	}
}

// reroute looks up the owner of each stray again: one of another node is
// moved there, one of n's subscribed again here (a MOVED reply brings it
// back while the slot map is stale). It returns errRetired when n has no
// channel left.
func (n *node) reroute(st *strays) error {
	chans := make([]string, 0, len(st.chans))
	for ch := range st.chans {
		chans = append(chans, ch)
	}
	clear(st.chans)
	slices.Sort(chans)
	var unknown []string
	for _, ch := range chans {
		if !n.ns.assigned(ch, n) {
			continue
		}
		addr, client := n.ns.owner(n.ctx, ch)
		switch addr {
		case "":
			unknown = append(unknown, ch)
		case n.addr:
			n.subscribe(n.ctx, ch)
		default:
			if to := n.ns.move(ch, n, addr, client); to != nil {
				to.subscribe(to.ctx, ch)
			}
		}
	}
	st.add(time.Now(), unknown...)
	if n.ns.retire(n) {
		return errRetired
	}
	return nil
}

// channelsOfSlot returns n's channels in slot.
func (n *node) channelsOfSlot(slot int) []string {
	return slices.DeleteFunc(n.ns.channelsOf(n), func(ch string) bool { return keyslot.Of(ch) != slot })
}

// redirection returns the slot of a MOVED or ASK error reply.
func redirection(err error) (int, bool) {
	if err == nil {
		return 0, false
	}
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	if !moved && !ask {
		return 0, false
	}
	f := strings.Fields(err.Error()) // MOVED <slot> <addr>
	if len(f) < 2 {
		return 0, false
	}
	slot, perr := strconv.Atoi(f[1])
	return slot, perr == nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
