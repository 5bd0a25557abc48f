package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// The watchdog extends a delivery's lease every third of it while the
// delivery is open, and takes the late lease of a delivery run before one.
// When the lease can no longer be vouched for (extensions fail until the
// conservative expiry, or Redis says the token is stale), it cancels the
// handler with ErrLeaseLost. It is a timer, not a goroutine.

// wdEvery is the spacing of extensions: a third of the lease.
func (d *delivery) wdEvery() time.Duration { return max(d.lease/3, 5*time.Millisecond) }

// wdMargin is how long before the local guarantee ends an extension is due.
func (d *delivery) wdMargin() time.Duration { return min(d.lease/10, 500*time.Millisecond) }

// wdNext is the wait before the next extension: a third of the lease, or
// less when the local guarantee needs renewing sooner. A delivery not
// leased yet waits for its LeaseAfter.
func (d *delivery) wdNext() time.Duration {
	now := d.now()
	if d.unleased.Load() {
		// LeaseAfter after the handler starts, but never later than
		// MaxLeaseAfter after the pop, as for a task run at once: a task
		// held until its due time, too, is leased well within
		// shard.UnleasedGrace of its pop.
		at := d.startAt.Add(d.q.opts.LeaseAfter)
		if last := d.sd.Leased.Add(MaxLeaseAfter); last.Before(at) {
			at = last
		}
		return max(at.Sub(now), time.Millisecond)
	}
	untilDue := time.Unix(0, d.validUntil.Load()).Sub(now) - d.wdMargin()
	return max(min(d.wdEvery(), untilDue), time.Millisecond)
}

func (d *delivery) startWatchdog() {
	d.wdMu.Lock()
	defer d.wdMu.Unlock()
	if !d.wdStopped {
		d.wdTimer = time.AfterFunc(d.wdNext(), d.wdTick)
	}
}

// wdTick runs one extension on the timer's goroutine and re-arms the
// timer unless the delivery was settled (or abandoned) meanwhile; then the
// extension's outcome no longer matters and is ignored.
func (d *delivery) wdTick() {
	// Counted under the lock that stopWatchdog takes: once every
	// delivery's watchdog is stopped no tick starts, and Run waits for
	// those in flight.
	d.wdMu.Lock()
	if d.wdStopped {
		d.wdMu.Unlock()
		return
	}
	d.ticks.Add(1)
	d.wdMu.Unlock()
	defer d.ticks.Done()
	if d.unleased.Load() {
		d.leaseLate()
		return
	}
	if lim := d.extendUntil.Load(); lim != 0 && d.now().UnixNano() > lim {
		d.log.Warn("handler outlived its timeout; no longer extending its lease", "task", d.sd.Task.ID, "queue", d.q.name)
		return
	}
	sent := d.now()
	ctx, cancel := context.WithTimeout(context.Background(), max(d.wdEvery(), 50*time.Millisecond))
	_, err := d.store.Extend(ctx, d.sd, d.lease)
	cancel()
	if d.wdDone() {
		return
	}
	switch {
	case err == nil:
		d.validUntil.Store(sent.Add(d.lease).UnixNano())
		d.q.refreshPermit(d.permit.Load(), d.lease, d.sd.Task.ID)
	case errors.Is(err, shard.ErrStaleToken):
		d.q.met.stale.Inc()
		d.lost("lease taken back by recovery")
		return
	default:
		if d.now().Add(d.wdMargin()).UnixNano() >= d.validUntil.Load() {
			d.lost("lease expired while Redis was unreachable: " + err.Error())
			return
		}
	}
	d.rearm(d.wdNext())
}

// leaseLate leases a delivery whose handler outlived LeaseAfter (on the
// watchdog timer's goroutine, counted in ticks). The claim presents the
// popped entry's number: if the task is no longer pending under it
// (cancelled, or taken back by recovery after UnleasedGrace) the handler
// is cancelled as on a lost lease. A failed claim is retried (claimPopped)
// until shard.LeaseMargin before UnleasedGrace has passed since the pop;
// then the handler is cancelled too, since recovery may take the task
// back.
func (d *delivery) leaseLate() {
	stale, err := d.takeLease()
	if d.wdDone() {
		return
	}
	switch {
	case err != nil:
		d.lost("could not lease the task within " + shard.UnleasedGrace.String() + " of its pop: " + err.Error())
		return
	case stale:
		d.q.met.stale.Inc()
		d.lost("task no longer pending: cancelled, or taken back by recovery")
		return
	}
	d.q.met.lateLeases.Inc()
	d.rearm(d.wdNext())
}

// takeLease leases a delivery run (or about to run) on its popped entry,
// presenting the entry's number; stale reports that the task is no
// longer pending under it.
func (d *delivery) takeLease() (stale bool, err error) {
	ds, sent, err := claimPopped(d.store, d.sd.Leased, d.sd.Shard, d.q.name, []string{d.sd.Ref()}, d.q.opts.Lease)
	if err != nil {
		return false, err
	}
	if len(ds) != 1 || ds[0].Token != d.sd.Token {
		return true, nil
	}
	d.validUntil.Store(sent.Add(d.lease).UnixNano())
	d.unleased.Store(false)
	return false, nil
}

// rearm schedules the next watchdog tick unless the delivery was settled.
func (d *delivery) rearm(after time.Duration) {
	d.wdMu.Lock()
	defer d.wdMu.Unlock()
	if !d.wdStopped {
		d.wdTimer.Reset(after)
	}
}

func (d *delivery) wdDone() bool {
	d.wdMu.Lock()
	defer d.wdMu.Unlock()
	return d.wdStopped
}

// stopWatchdog stops extending the lease (idempotent).
func (d *delivery) stopWatchdog() {
	d.wdMu.Lock()
	defer d.wdMu.Unlock()
	d.wdStopped = true
	if d.wdTimer != nil {
		d.wdTimer.Stop()
	}
}

// lost cancels the handler because its lease could not be kept.
func (d *delivery) lost(why string) {
	d.q.met.leaseLost.Inc()
	d.log.Warn("lease lost; cancelling handler", "task", d.sd.Task.ID, "queue", d.q.name, "reason", why)
	if d.cancel != nil {
		d.cancel(ErrLeaseLost)
	}
}
