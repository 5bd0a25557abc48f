package inspect

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Queues returns every queue, by name, with its counts, and the totals
// over all of them: one pipelined round trip of one bounded script call
// per shard, one read of the paused queues and one of the queues'
// retentions, and for Workers a read of the process registry (CLIENT
// LIST of every primary and one HGETALL). Queues that are no longer
// registered but still hold tasks (dead letters, say) are listed as
// removed; dead data that names no queue is listed under the name "".
// Shards whose data cannot be read are left out of the counts and
// reported by a *PartialError (ErrPartial), returned with the rest.
func (i *Inspector) Queues(ctx context.Context) ([]Queue, Counts, error) {
	qs, err := i.queues(ctx, false)
	if err != nil && !errors.Is(err, ErrPartial) {
		return nil, Counts{}, err
	}
	var total Counts
	for _, q := range qs {
		total.add(q.Counts)
	}
	return qs, total, err
}

// Queue returns one queue with its per-shard counts (Queue.Shards: one
// per shard of the span while the shard count changes).
// ErrNotFound when no shard has it registered or counts tasks of it. A
// *PartialError (ErrPartial) comes with the queue when some shards could
// not be read.
func (i *Inspector) Queue(ctx context.Context, name string) (Queue, error) {
	qs, err := i.queues(ctx, true)
	if err != nil && !errors.Is(err, ErrPartial) {
		return Queue{}, err
	}
	for _, q := range qs {
		if q.Name == name {
			return q, err
		}
	}
	if err != nil {
		return Queue{}, errorf(ErrNotFound, "queue %q not found (%w)", name, err)
	}
	return Queue{}, errorf(ErrNotFound, "queue %q not found", name)
}

// queues gathers the depth of every shard of the layout's span and the
// paused set.
func (i *Inspector) queues(ctx context.Context, perShard bool) ([]Queue, error) {
	l, err := i.layout(ctx)
	if err != nil {
		return nil, err
	}
	depths, derr := i.store.Depth(ctx, span(l))
	if derr = partialOf(derr); derr != nil && !errors.Is(derr, ErrPartial) {
		return nil, derr
	}
	controls, err := i.store.Controls(ctx)
	if err != nil {
		return nil, err
	}
	paused, limits := controls.Paused, controls.Limits
	byName := map[string]*Queue{}
	for sh, ds := range depths {
		for _, d := range ds {
			q := byName[d.Queue]
			if q == nil {
				q = &Queue{Name: d.Queue, State: QueueRemoved}
				if perShard {
					q.Shards = make([]Counts, len(depths))
				}
				byName[d.Queue] = q
			}
			if d.Registered && !d.Removed {
				q.State, q.Policy = QueueActive, policyOf(d.Policy)
			} else if d.Registered && q.Policy == (Policy{}) {
				q.Policy = policyOf(d.Policy)
			}
			c := countsOf(d)
			q.Counts.add(c)
			if !d.OldestReady.IsZero() && (q.OldestReady.IsZero() || d.OldestReady.Before(q.OldestReady)) {
				q.OldestReady = d.OldestReady
			}
			if perShard {
				q.Shards[sh] = c
			}
		}
	}
	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	kept, err := i.store.Retentions(ctx, names)
	if err != nil {
		return nil, err
	}
	fair, err := i.store.FairWindows(ctx, names)
	if err != nil {
		return nil, err
	}
	caps, err := i.store.KeyCapDefaults(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]Queue, 0, len(byName))
	for _, q := range byName {
		if at, ok := paused[q.Name]; ok && q.State == QueueActive {
			q.State, q.PausedAt = QueuePaused, at
		}
		if l, ok := limits[q.Name]; ok {
			q.Limits = &l
		}
		if r, ok := controls.Routes[q.Name]; ok {
			q.Routing = &r
		}
		if r := kept[q.Name]; r.Age > 0 {
			q.Retention = &Retention{Age: r.Age, Count: r.Count}
		}
		q.FairWindow, q.KeyConcurrency = fair[q.Name], caps[q.Name]
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b Queue) int { return cmpString(a.Name, b.Name) })
	i.countWorkers(ctx, out, controls)
	return out, derr
}

// countWorkers sets each queue's Workers: the live workers that serve it
// and its routing admits (-1 when the process registry cannot be read,
// and for the dead data of no queue), and RoutingError.
func (i *Inspector) countWorkers(ctx context.Context, qs []Queue, c shard.Controls) {
	ps, err := procs.List(ctx, i.rdb, i.Namespace(), 0)
	n := eligible(ps, c)
	for k := range qs {
		switch {
		case qs[k].Name == "" || err != nil:
			qs[k].Workers = -1 // dead data of no queue: none serves it
		default:
			qs[k].Workers = n[qs[k].Name]
			qs[k].Canaries = canaries(ps, c, qs[k].Name)
		}
		if rerr := c.BadRoutes[qs[k].Name]; rerr != nil {
			qs[k].RoutingError = rerr.Error()
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func countsOf(d shard.QueueDepth) Counts {
	return Counts{Scheduled: d.Scheduled, Ready: d.Ready, InFlight: d.Leased + d.Popped, Dead: d.Dead}
}

// span returns the shards that exist in l: 0..Existing-1 (the old and the
// new ones while the shard count changes).
func span(l shard.Layout) []int {
	s := make([]int, l.Existing())
	for k := range s {
		s[k] = k
	}
	return s
}

func policyOf(p shard.QueuePolicy) Policy {
	return Policy{
		MaxRetries: hourglass.Retries(p.MaxRetries), Timeout: p.Timeout, MaxPayload: p.MaxPayload,
		BackoffBase: p.Backoff.Base, BackoffCap: p.Backoff.Cap, BackoffFactor: p.Backoff.Factor,
	}
}

// shardPolicy converts p, filling each zero field (nil MaxRetries) with
// its default.
func (p Policy) shardPolicy() shard.QueuePolicy {
	d := DefaultPolicy()
	if p.MaxRetries == nil {
		p.MaxRetries = d.MaxRetries
	}
	return shard.QueuePolicy{
		MaxRetries: *p.MaxRetries,
		Timeout:    confcheck.Or(p.Timeout, d.Timeout),
		MaxPayload: confcheck.Or(p.MaxPayload, d.MaxPayload),
		Backoff: shard.Backoff{Base: confcheck.Or(p.BackoffBase, d.BackoffBase), Cap: confcheck.Or(p.BackoffCap, d.BackoffCap),
			Factor: confcheck.Or(p.BackoffFactor, d.BackoffFactor)},
	}
}

// DefaultPolicy is the policy of a queue registered without settings: the
// same defaults as the schedulers' queues config.
func DefaultPolicy() Policy {
	return Policy{MaxRetries: hourglass.Retries(shard.DefaultMaxRetries), Timeout: shard.DefaultTimeout, MaxPayload: shard.DefaultMaxPayload,
		BackoffBase: shard.DefaultBackoff.Base, BackoffCap: shard.DefaultBackoff.Cap, BackoffFactor: shard.DefaultBackoff.Factor}
}

// SetQueue registers queue name with policy p in every shard, or changes
// its policy; it takes effect at once for new enqueues and retries, with
// no scheduler restart. Zero fields of p, and a nil MaxRetries, mean the
// defaults (DefaultPolicy). A removed queue that is still draining
// becomes active again. A scheduler that starts re-registers the queues
// of its own config with the config's policies: make lasting changes
// there too.
func (i *Inspector) SetQueue(ctx context.Context, name string, p Policy) error {
	if _, err := i.layout(ctx); err != nil {
		return err
	}
	_, err := i.store.SetQueue(ctx, name, p.shardPolicy())
	return mapErr(err)
}

// RemoveQueue marks queue name removed: enqueues to it are refused from
// now on, its stored tasks (scheduled, ready, running, dead) drain as
// usual, and each shard's owner deletes the registration once the
// queue's tasks in that shard are gone. ErrNotFound if not registered.
func (i *Inspector) RemoveQueue(ctx context.Context, name string) error {
	if _, err := i.layout(ctx); err != nil {
		return err
	}
	err := i.store.RemoveQueue(ctx, name)
	if errors.Is(err, shard.ErrNotFound) { // the store's is the client's "task not found"
		return errorf(ErrNotFound, "queue %q is not registered", name)
	}
	return mapErr(err)
}

// Pause pauses queue name cluster-wide: workers start no new task of it
// (within a second; tasks already running finish), while enqueues and
// moves to ready lists go on. Idempotent. ErrNotFound if the queue is
// not registered.
func (i *Inspector) Pause(ctx context.Context, name string) error {
	if err := i.mustExist(ctx, name); err != nil {
		return err
	}
	_, err := i.store.SetPaused(ctx, name, true)
	return mapErr(err)
}

// Resume resumes a paused queue; workers are told at once (an event, not
// a poll) and deliver everything that waited. Idempotent for a queue that
// is registered. ErrNotFound, as Pause, for a queue that is neither paused
// nor registered (a typo resumes nothing); a paused queue is resumed
// whether registered or not, so that the pause of a queue since removed
// can be cleared.
func (i *Inspector) Resume(ctx context.Context, name string) error {
	changed, err := i.store.SetPaused(ctx, name, false)
	if err != nil || changed {
		return mapErr(err)
	}
	return i.mustExist(ctx, name)
}

// SetQueueLimits sets queue's cluster-wide flow-control limits at run
// time (QueueLimits says what they replace), for the whole deployment;
// workers are told at once (an event, not a poll). ErrInvalidArgument
// for limits out of bounds; ErrNotFound for a queue that is not
// registered.
func (i *Inspector) SetQueueLimits(ctx context.Context, name string, l QueueLimits) error {
	if err := l.Validate(); err != nil {
		return ofKind(ErrInvalidArgument, err)
	}
	if err := i.mustExist(ctx, name); err != nil {
		return err
	}
	_, err := i.store.SetQueueLimits(ctx, name, &l)
	return mapErr(err)
}

// ClearQueueLimits drops the limits SetQueueLimits set: the workers go
// back to their own configuration. Idempotent; it does not require the
// queue to be registered (a removed queue's limits can be cleared).
func (i *Inspector) ClearQueueLimits(ctx context.Context, name string) error {
	_, err := i.store.SetQueueLimits(ctx, name, nil)
	return mapErr(err)
}

// SetKeyWeight sets the weight of key in fair queue name (docs/fairness.md):
// the turns the key takes per round of the queue's ring in each shard,
// 0..MaxKeyWeight; 1, the default, drops the key's own; 0 pauses the key
// (its tasks wait, unclaimed, and its turns go to the other keys) until
// a weight above 0 is set. Each shard's window is refilled at once.
// ErrInvalidArgument for a key or weight out of bounds; ErrNotFound for
// a queue that is not registered.
func (i *Inspector) SetKeyWeight(ctx context.Context, name, key string, weight int) error {
	if weight < 0 || weight > MaxKeyWeight {
		return errorf(ErrInvalidArgument, "weight %d not in 0..%d", weight, MaxKeyWeight)
	}
	return i.keyChange(ctx, name, key, func() error { return i.store.SetKeyWeight(ctx, name, key, weight) })
}

// KeyWeights returns the keys of queue name that have a weight of their
// own (SetKeyWeight); the others weigh 1.
func (i *Inspector) KeyWeights(ctx context.Context, name string) (map[string]int, error) {
	if !shard.ValidQueue(name) {
		return nil, errorf(ErrInvalidArgument, "queue name %q must match %s", name, shard.QueueRule)
	}
	w, err := i.store.KeyWeights(ctx, name)
	return w, mapErr(err)
}

// MaxKeyWeight is the largest weight of a key of a fair queue.
const MaxKeyWeight = shard.MaxKeyWeight

// PausedQueues returns the paused queues and when each was paused.
func (i *Inspector) PausedQueues(ctx context.Context) (map[string]time.Time, error) {
	return i.store.Paused(ctx)
}

func (i *Inspector) mustExist(ctx context.Context, name string) error {
	l, err := i.layout(ctx)
	if err != nil {
		return err
	}
	reg, err := i.store.Registration(ctx, []string{name})
	if err != nil {
		return err
	}
	if len(reg.Missing[name]) >= l.Shards() { // Registration looks in the shards new tasks go to
		return errorf(ErrNotFound, "queue %q is not registered", name)
	}
	return nil
}

// mapErr translates the store's sentinel errors into this package's
// (ofKind: the message is the store's, said once).
func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shard.ErrNotFound):
		return ofKind(ErrNotFound, err)
	case errors.Is(err, shard.ErrActive):
		return ofKind(ErrActive, err)
	case errors.Is(err, shard.ErrDead):
		return ofKind(ErrDead, err)
	case errors.Is(err, shard.ErrInvalidArgument), errors.Is(err, shard.ErrUndecodable):
		return ofKind(ErrInvalidArgument, err)
	}
	return err
}
