package worker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/coord"
	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// opTimeout bounds each Redis call made on a delivery's behalf (claim,
// ack, nack, extend, release).
const opTimeout = 5 * time.Second

// Worker consumes the queues registered with Handle. Build it with New.
type Worker struct {
	store *shard.Store
	cfg   Config
	log   hclog.Logger
	met   *metrics

	mu      sync.Mutex
	queues  map[string]*queue
	started bool

	freed chan struct{}  // a handler slot was freed (capacity 1)
	acks  *acker         // batches acknowledgements
	ticks sync.WaitGroup // lease extensions in flight (watchdog timer callbacks)

	// hooks for tests in this package.
	afterPop func(ids []string) bool // false: drop the ids (simulates a crash before claiming)
}

// popBatchMax bounds the ids one fetch pops (and one claim leases): a
// smaller batch is claimed sooner, so its handlers start while the next
// batch is popped and claimed.
const popBatchMax = 64

// queue is one consumed queue.
type queue struct {
	name    string
	h       Handler
	opts    QueueOptions
	running atomic.Int64
	// settling counts acks in flight whose slot was freed early.
	settling atomic.Int64

	timeoutErr error // cause of a handler's ctx at HandlerTimeout, built once
	met        queueMetrics

	// Cluster-wide flow control (nil when not configured).
	sem         *coord.Semaphore
	permitLease time.Duration // the lease a permit is acquired with
	limit       *coord.TokenBucket
	freed       chan struct{} // a slot of this queue was freed (capacity 1)
}

func (q *queue) free() int { return q.opts.Concurrency - int(q.running.Load()) }

// settleEarly takes one of the Concurrency places for acks outstanding on
// slots freed before the ack landed; false when all are taken. It never
// counts past the bound, even for a moment.
func (q *queue) settleEarly() bool {
	for s := q.settling.Load(); s < int64(q.opts.Concurrency); s = q.settling.Load() {
		if q.settling.CompareAndSwap(s, s+1) {
			return true
		}
	}
	return false
}

// New returns a Worker on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Worker, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidConfig)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultNamespace
	}
	if cfg.Shards == 0 {
		cfg.Shards = DefaultShards
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = DefaultShutdownGrace
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	switch {
	case cfg.AckLinger == 0:
		cfg.AckLinger = DefaultAckLinger
	case cfg.AckLinger > MaxAckLinger:
		return nil, fmt.Errorf("%w: AckLinger %s above %s", ErrInvalidConfig, cfg.AckLinger, MaxAckLinger)
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.ShutdownGrace < 0 {
		cfg.ShutdownGrace = 0 // NoGrace: release at once
	}
	switch {
	case cfg.FetchTimeout < time.Second:
		return nil, fmt.Errorf("%w: FetchTimeout %s below Redis's 1s granularity", ErrInvalidConfig, cfg.FetchTimeout)
	}
	l, err := shard.NewLayout(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("worker: register metrics: %w", err)
	}
	store := shard.NewStore(rdb, l)
	return &Worker{
		store:  store,
		acks:   newAcker(store, cfg.AckLinger),
		cfg:    cfg,
		log:    cfg.Logger.Named("worker"),
		met:    met,
		queues: map[string]*queue{},
		freed:  make(chan struct{}, 1),
	}, nil
}

// Handle registers h for queue. It must be called before Run.
func (w *Worker) Handle(name string, h Handler, opts QueueOptions) error {
	if !shard.ValidQueue(name) {
		return fmt.Errorf("%w: queue name %q", ErrInvalidConfig, name)
	}
	if h == nil {
		return fmt.Errorf("%w: nil handler for queue %q", ErrInvalidConfig, name)
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = DefaultConcurrency
	}
	switch {
	case opts.HandlerTimeout == 0:
		opts.HandlerTimeout = DefaultHandlerTimeout
	case opts.HandlerTimeout < 0:
		opts.HandlerTimeout = 0 // NoTimeout
	}
	if opts.Concurrency < 0 || opts.Lease < 0 {
		return fmt.Errorf("%w: queue %q: negative option", ErrInvalidConfig, name)
	}
	if opts.Lease > 0 && opts.Lease < 10*time.Millisecond {
		return fmt.Errorf("%w: queue %q: lease %s below 10ms", ErrInvalidConfig, name, opts.Lease)
	}
	switch {
	case opts.LeaseAfter == 0:
		opts.LeaseAfter = DefaultLeaseAfter
	case opts.LeaseAfter > MaxLeaseAfter:
		return fmt.Errorf("%w: queue %q: LeaseAfter %s above %s", ErrInvalidConfig, name, opts.LeaseAfter, MaxLeaseAfter)
	}
	if opts.LeaseAfter < 0 || opts.flowControlled() {
		opts.LeaseAfter = LeaseFirst
	}
	q := &queue{name: name, h: h, opts: opts, freed: make(chan struct{}, 1),
		timeoutErr: fmt.Errorf("handler timeout %s", opts.HandlerTimeout),
		met:        w.met.forQueue(name)}
	if err := w.flowControl(q); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return fmt.Errorf("%w: Handle after Run", ErrInvalidConfig)
	}
	if _, dup := w.queues[name]; dup {
		return fmt.Errorf("%w: queue %q registered twice", ErrInvalidConfig, name)
	}
	w.queues[name] = q
	return nil
}

// flowKey names a queue's flow-control primitives; they share one hash
// tag per queue (one Cluster slot).
func (w *Worker) flowKey(queue string) string { return w.cfg.Namespace + ":flow:" + queue }

// flowControl builds the queue's semaphore and rate limiter.
func (w *Worker) flowControl(q *queue) error {
	o := q.opts
	if o.MaxConcurrency < 0 || o.Rate < 0 || o.Burst < 0 || o.RatePeriod < 0 {
		return fmt.Errorf("%w: queue %q: negative flow-control option", ErrInvalidConfig, q.name)
	}
	rdb := w.store.Redis()
	if o.MaxConcurrency > 0 {
		// A permit starts with the queue's lease (or a default) and is
		// set to each delivery's own lease once claimed, unless it has
		// that lease already.
		lease := o.Lease
		if lease == 0 {
			lease = defaultPermitLease
		}
		q.permitLease = lease
		sem, err := coord.NewSemaphore(rdb, w.flowKey(q.name), o.MaxConcurrency, lease)
		if err != nil {
			return fmt.Errorf("%w: queue %q: %w", ErrInvalidConfig, q.name, err)
		}
		q.sem = sem
	}
	if o.Rate > 0 {
		period, burst := o.RatePeriod, o.Burst
		if period == 0 {
			period = time.Second
		}
		if burst == 0 {
			burst = 1
		}
		lim, err := coord.NewTokenBucket(rdb, w.flowKey(q.name), o.Rate, period, burst)
		if err != nil {
			return fmt.Errorf("%w: queue %q: %w", ErrInvalidConfig, q.name, err)
		}
		q.limit = lim
	}
	return nil
}

// defaultPermitLease is a permit's lease between its acquisition and the
// claim that sets it to the delivery's lease.
const defaultPermitLease = 30 * time.Second

// Run consumes tasks until ctx ends, then shuts down gracefully (see the
// package documentation) and returns nil. It returns an error only for a
// worker that cannot start.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return fmt.Errorf("%w: Run called twice", ErrInvalidConfig)
	}
	w.started = true
	queues := make([]*queue, 0, len(w.queues))
	for _, q := range w.queues {
		queues = append(queues, q)
	}
	w.mu.Unlock()
	if len(queues) == 0 {
		return fmt.Errorf("%w: no queue registered", ErrInvalidConfig)
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i].name < queues[j].name })

	// Handlers run under hctx, which outlives ctx by the shutdown grace.
	hctx, stopHandlers := context.WithCancelCause(context.Background())
	defer stopHandlers(nil)
	var handlers sync.WaitGroup
	run := &runState{w: w, hctx: hctx, wg: &handlers, active: map[*delivery]struct{}{}}

	w.acks.start()
	defer w.acks.stop() // after the handlers: their acks go out first
	w.log.Info("worker started", "queues", len(queues), "shards", w.cfg.Shards)
	// Queues under cluster-wide flow control each get their own fetch
	// loop (it must hold a permit and a token before popping); the others
	// share one.
	var plain []*queue
	var loops sync.WaitGroup
	for _, q := range queues {
		if !q.opts.flowControlled() {
			plain = append(plain, q)
			continue
		}
		loops.Add(1)
		go func() { defer loops.Done(); w.flowLoop(ctx, q, run) }()
	}
	if len(plain) > 0 {
		w.fetchLoop(ctx, plain, run)
	}
	loops.Wait()
	run.claims.Wait() // every popped id is now running, settled or left for recovery

	// Shutdown: no more fetching. Give running handlers the grace period.
	w.log.Info("shutting down; waiting for running handlers", "grace", w.cfg.ShutdownGrace, "running", run.count())
	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(w.cfg.ShutdownGrace): // fires at once for NoGrace
		w.log.Warn("shutdown grace over; releasing unfinished tasks", "running", run.count())
		stopHandlers(ErrShuttingDown)
		// Handlers see their ctx cancelled; each finishes by releasing
		// its task. Manual-ack deliveries still open are released here.
		run.releaseOpen()
		select {
		case <-done:
		case <-time.After(opTimeout):
			// Stop extending their leases: recovery will deliver their
			// tasks again once the leases lapse.
			n := run.abandon()
			w.log.Error("handlers ignore their ctx; returning without them; recovery takes their tasks back once their leases lapse (unleased ones after about a second), counting an attempt", "running", n)
		}
	}
	w.ticks.Wait() // lease extensions still in flight (each bounded by its timeout)
	w.log.Info("worker stopped")
	return nil
}

// runState tracks one Run's deliveries.
type runState struct {
	w      *Worker
	hctx   context.Context
	wg     *sync.WaitGroup // handlers
	claims sync.WaitGroup  // claims in flight

	mu     sync.Mutex
	active map[*delivery]struct{}
}

func (r *runState) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.active)
}

// abandon stops the lease watchdog of every delivery still open and
// returns how many there were.
func (r *runState) abandon() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for d := range r.active {
		d.stopWatchdog()
	}
	return len(r.active)
}

// releaseOpen releases manual-ack deliveries whose handler has returned
// but which were never acked or nacked.
func (r *runState) releaseOpen() {
	r.mu.Lock()
	open := make([]*delivery, 0, len(r.active))
	for d := range r.active {
		open = append(open, d)
	}
	r.mu.Unlock()
	for _, d := range open {
		if d.handlerDone.Load() {
			_ = d.finish(context.Background(), ErrShuttingDown)
		}
	}
}

// fetchLoop pops and claims tasks for queues with free handler slots
// until ctx ends.
func (w *Worker) fetchLoop(ctx context.Context, queues []*queue, run *runState) {
	// One key ring per set of queues with free slots (a bit mask over
	// queues; almost always all of them), built once.
	rings := map[uint64]*readyRing{}
	var bo backoff.Backoff
	for ctx.Err() == nil {
		var avail []string
		var mask uint64
		count := 0
		for i, q := range queues {
			if f := q.free(); f > 0 {
				avail = append(avail, q.name)
				mask |= 1 << (i % 64)
				if count == 0 || f < count {
					count = f
				}
			}
		}
		if len(avail) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-w.freed:
			}
			continue
		}
		ring := rings[mask]
		if ring == nil || len(queues) > 64 { // beyond 64 queues masks collide: rebuild
			ring = &readyRing{keys: w.store.Layout().ReadyKeys(avail)}
			rings[mask] = ring
		}
		if err := w.popClaim(ctx, ring.rotated(), min(count, popBatchMax), nil, nil, run); err != nil {
			if ctx.Err() != nil {
				return
			}
			w.met.fetchErrs.Inc()
			w.log.Warn("fetch failed; retrying", "error", err)
			bo.Wait(ctx)
			continue
		}
		bo.Reset()
	}
}

// readyRing hands out a fixed set of ready-list keys, rotated by one more
// on each call so that no shard's list always comes first. The slice it
// returns is reused by the next call.
type readyRing struct {
	keys []string // in shard order
	buf  []string
	next int
}

func (r *readyRing) rotated() []string {
	r.next = (r.next + 1) % len(r.keys)
	r.buf = append(append(r.buf[:0], r.keys[r.next:]...), r.keys[:r.next]...)
	return r.buf
}

// popClaim pops at most count ids from keys and claims them in the
// background, with permit if the queue q is under flow control. When
// nothing was popped (or the test hook dropped it) the permit is given
// back; the error is the pop's.
func (w *Worker) popClaim(ctx context.Context, keys []string, count int, permit *coord.Permit, q *queue, run *runState) error {
	key, ids, err := w.store.Pop(ctx, keys, count, w.cfg.FetchTimeout)
	// afterPop is a test hook: false means the worker "crashed" between
	// pop and lease.
	if err == nil && len(ids) > 0 && (w.afterPop == nil || w.afterPop(ids)) {
		w.claimAsync(ctx, key, ids, permit, run)
		return nil
	}
	w.releasePermit(q, permit)
	return err
}

// flowLoop fetches one queue under cluster-wide flow control, one task at
// a time: wait for a local slot, then a rate token (sleeping the time the
// limiter names, never polling), then a semaphore permit (blocking until
// one is released or expires), and only then pop and claim.
func (w *Worker) flowLoop(ctx context.Context, q *queue, run *runState) {
	m := w.met
	ring := &readyRing{keys: w.store.Layout().ReadyKeys([]string{q.name})}
	retry := func(err error, what string) {
		m.fetchErrs.Inc()
		w.log.Warn("flow control: "+what+" failed; retrying", "queue", q.name, "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	for ctx.Err() == nil {
		if q.free() <= 0 {
			select {
			case <-ctx.Done():
				return
			case <-q.freed:
			}
			continue
		}
		if q.limit != nil {
			res, err := q.limit.Allow(ctx)
			if err != nil {
				if ctx.Err() == nil {
					retry(err, "rate limiter")
				}
				continue
			}
			if !res.Allowed {
				m.throttled.WithLabelValues(q.name).Inc()
				select {
				case <-ctx.Done():
				case <-time.After(max(res.RetryAfter, time.Millisecond)):
				}
				continue
			}
		}
		var permit *coord.Permit
		if q.sem != nil {
			start := time.Now()
			p, err := q.sem.TryAcquire(ctx)
			if errors.Is(err, coord.ErrNotAcquired) {
				m.flowWaits.WithLabelValues(q.name).Inc()
				p, err = q.sem.Acquire(ctx)
			}
			if err != nil {
				if ctx.Err() == nil {
					retry(err, "semaphore")
				}
				continue
			}
			m.flowWait.WithLabelValues(q.name).Observe(time.Since(start).Seconds())
			permit = &p
			m.permits.WithLabelValues(q.name).Inc()
		}
		if err := w.popClaim(ctx, ring.rotated(), 1, permit, q, run); err != nil && ctx.Err() == nil {
			retry(err, "fetch")
		}
	}
}

// releasePermit gives a semaphore permit back (nil: nothing to do).
func (w *Worker) releasePermit(q *queue, p *coord.Permit) {
	if p == nil {
		return
	}
	w.met.permits.WithLabelValues(q.name).Dec()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := q.sem.Release(ctx, *p); err != nil && !errors.Is(err, coord.ErrNotHeld) {
		// It expires with its lease.
		w.log.Warn("could not release a concurrency permit; it expires with its lease", "queue", q.name, "error", err)
	}
}

// claim leases popped ids and starts their handlers; if the worker is
// shutting down it gives them straight back. permit, if not nil, is the
// concurrency permit acquired for the (single) popped id; it follows the
// delivery's lease and is released with it.
func (w *Worker) claim(ctx context.Context, q *queue, sh int, ids []string, poppedAt time.Time, permit *coord.Permit, run *runState) {
	// The caller reserved one slot per popped id; each id that does not
	// become a running handler gives its slot back.
	unreserve := len(ids)
	defer func() {
		if unreserve > 0 {
			q.running.Add(int64(-unreserve))
			w.slotFreed(q)
		}
	}()
	if permit != nil {
		defer func() { w.releasePermit(q, permit) }() // unless a delivery took it
	}
	ds, sent, err := w.claimPopped(poppedAt, sh, q.name, ids, q.opts.Lease)
	if err != nil {
		w.met.fetchErrs.Inc()
		w.log.Warn("claim failed; recovery will take the ids back, counting an attempt", "error", err, "shard", sh, "queue", q.name, "ids", len(ids))
		return
	}
	for _, sd := range ds {
		d := newDelivery(w, q, sd, sent)
		unreserve-- // the delivery's finish frees this slot
		if permit != nil {
			d.permit, permit = permit, nil
			// The permit was acquired a moment ago; it needs a round trip
			// only if the delivery's lease differs from the permit's.
			if d.lease != q.permitLease {
				d.refreshPermit()
			}
		}
		if sd.DecodeErr != nil {
			// Data this binary cannot read: never run it, dead-letter it.
			_ = d.finish(context.Background(), NoRetry(sd.DecodeErr))
			continue
		}
		run.start(ctx, d)
	}
}

// start runs the delivery's handler in a goroutine of its own; if the
// worker is shutting down (ctx ended) it gives the task back instead.
func (r *runState) start(ctx context.Context, d *delivery) {
	if ctx.Err() != nil {
		// Popped while shutting down: give it back at once.
		_ = d.finish(context.Background(), ErrShuttingDown)
		return
	}
	r.mu.Lock()
	r.active[d] = struct{}{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		d.run(r.hctx)
		r.mu.Lock()
		delete(r.active, d)
		r.mu.Unlock()
	}()
}

// claimPopped leases entries popped at poppedAt, retrying a failed claim
// while the ids are surely still this worker's: recovery takes popped,
// unleased ids back no sooner than shard.UnleasedGrace after the pop, and
// a retried claim of an entry already leased returns that lease. sent is
// the first attempt's time: Redis started the leases no earlier. Both the
// lease-first path and the late lease of a running task use it.
func (w *Worker) claimPopped(poppedAt time.Time, sh int, queue string, ids []string, lease time.Duration) (ds []shard.Delivery, sent time.Time, err error) {
	sent = time.Now()
	until := poppedAt.Add(shard.UnleasedGrace - unleasedMargin)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		ctx, cancel := context.WithDeadline(context.Background(), until)
		ds, err = w.store.Claim(ctx, sh, queue, ids, lease)
		cancel()
		if err == nil || time.Now().Add(wait).After(until) {
			return ds, sent, err
		}
		time.Sleep(wait)
	}
}

// claimAsync reserves a slot per popped entry, starts the handlers of
// those it may run before leasing them (see QueueOptions.LeaseAfter) and
// claims the others in the background, so the fetch loop can pop again
// while the claim is in flight. Run waits for run.claims before it waits
// for the handlers.
func (w *Worker) claimAsync(ctx context.Context, key string, entries []string, permit *coord.Permit, run *runState) {
	sh, qname, ok := w.store.Layout().ParseReady(key)
	w.mu.Lock()
	q := w.queues[qname]
	w.mu.Unlock()
	if !ok || q == nil {
		w.log.Error("popped from an unexpected key; ids left for recovery", "key", key, "ids", len(entries))
		if permit != nil && q != nil {
			w.releasePermit(q, permit)
		}
		return
	}
	poppedAt := time.Now()
	q.running.Add(int64(len(entries)))
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		if permit == nil && q.opts.LeaseAfter > 0 {
			if sd, ok := shard.Popped(sh, e, q.opts.Lease); ok {
				run.start(ctx, newDelivery(w, q, sd, sd.Leased))
				continue
			}
		}
		// Lease first: the queue asks for it, or the entry does not carry
		// a task this binary can read (claim.lua decides about those).
		ids = append(ids, shard.EntryRef(e))
	}
	if len(ids) == 0 {
		return
	}
	run.claims.Add(1)
	go func() {
		defer run.claims.Done()
		w.claim(ctx, q, sh, ids, poppedAt, permit, run)
	}()
}

// slotFreed wakes the fetch loops waiting for a free slot.
func (w *Worker) slotFreed(q *queue) {
	for _, ch := range []chan struct{}{w.freed, q.freed} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// refreshPermit sets the delivery's permit to expire with its lease.
func (d *delivery) refreshPermit() {
	if d.permit == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := d.q.sem.Refresh(ctx, *d.permit, d.lease); err != nil {
		d.w.log.Warn("could not refresh a concurrency permit", "task", d.sd.Task.ID, "queue", d.q.name, "error", err)
	}
}

// delivery is one leased task in this worker.
type delivery struct {
	w     *Worker
	q     *queue
	sd    shard.Delivery
	task  *Task
	lease time.Duration

	permit      *coord.Permit // cluster-wide concurrency permit, if the queue has one
	validUntil  atomic.Int64  // local unix nanos until which the lease surely holds
	extendUntil atomic.Int64  // local unix nanos after which the lease is not extended (0: no limit)
	handlerDone atomic.Bool
	unleased    atomic.Bool // runs on its popped entry; leased at LeaseAfter
	// startAt is when the handler starts: at once, or at the task's due
	// time for a task moved ahead of it (scheduler.prefetch) by at most
	// maxHold.
	startAt time.Time

	cancel context.CancelCauseFunc
	// The watchdog is a timer, not a goroutine: a handler that finishes
	// within a third of its lease costs no extension and no goroutine.
	wdMu      sync.Mutex
	wdTimer   *time.Timer
	wdStopped bool
	once      sync.Once
	finished  chan struct{} // closed when acked, nacked or released
	outcome   outcome       // what was recorded (valid once finished is closed)
	result    error
}

// outcome is how a delivery was settled.
type outcome int

const (
	outcomeAck outcome = iota + 1
	outcomeNack
	outcomeRelease
)

func (o outcome) String() string {
	return [...]string{"", "acked", "nacked", "released"}[o]
}

func outcomeOf(err error) outcome {
	switch {
	case err == nil:
		return outcomeAck
	case errors.Is(err, ErrShuttingDown):
		return outcomeRelease
	default:
		return outcomeNack
	}
}

// ErrAlreadySettled is returned by Task.Ack or Task.Nack when the delivery
// was settled otherwise before (released at shutdown, or failed after a
// lost lease or a handler timeout).
var ErrAlreadySettled = errors.New("worker: delivery already settled")

func newDelivery(w *Worker, q *queue, sd shard.Delivery, sent time.Time) *delivery {
	d := &delivery{
		w: w, q: q, sd: sd,
		lease:    sd.Deadline.Sub(sd.Leased),
		finished: make(chan struct{}),
	}
	// The claim was sent at `sent`; Redis set the deadline to its time of
	// the claim plus the lease, which is no earlier than sent + lease.
	d.validUntil.Store(sent.Add(d.lease).UnixNano())
	d.unleased.Store(sd.Unleased)
	d.startAt = time.Now()
	switch ahead := sd.Task.Due.Sub(d.startAt); {
	case ahead <= 0:
	case ahead <= maxHold:
		d.startAt = sd.Task.Due // moved ahead (scheduler.prefetch): hold it
	default:
		// No scheduler moves a task this far ahead: this worker's clock is
		// behind Redis's. Holding would delay the task by the skew; run it.
		w.met.clockBehind.Inc()
	}
	t := sd.Task
	d.task = &Task{
		ID: t.ID, Queue: t.Queue, Payload: t.Payload, Attempt: t.Attempts + 1,
		MaxRetries: t.MaxRetries, Due: t.Due, Enqueued: t.Enqueued, d: d,
	}
	q.met.deliveries.Inc()
	return d
}

// run executes the handler under the watchdog and settles the delivery.
func (d *delivery) run(parent context.Context) {
	m := &d.q.met
	ctx, cancel := context.WithCancelCause(parent)
	d.cancel = cancel
	defer cancel(nil)
	// The watchdog keeps a lease (or takes the late one) from now on, also
	// while a task moved ahead of its due time waits for it.
	d.startWatchdog()
	held, err := d.hold(ctx)
	if err != nil {
		_ = d.finish(context.Background(), err)
		return
	}
	if t := d.q.opts.HandlerTimeout; t > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, t, d.q.timeoutErr)
		defer stop()
		// A handler that ignores its ctx keeps the lease only one more
		// lease period: then the lease lapses and recovery takes over.
		d.extendUntil.Store(time.Now().Add(t + d.lease).UnixNano())
	}

	// Lateness: claim time - due on Redis's clock, or for a task run
	// before its lease, pop time on the local clock - due; for a task held
	// until its due time, now on the local clock - due.
	late := d.sd.Leased.Sub(d.sd.Task.Due)
	if held {
		late = time.Since(d.sd.Task.Due)
	}
	m.lateness.Observe(max(late, 0).Seconds())
	m.running.Inc()
	start := time.Now()
	err = d.call(ctx)
	m.duration.Observe(time.Since(start).Seconds())
	m.running.Dec()
	d.handlerDone.Store(true)

	switch {
	case err == nil && d.q.opts.ManualAck:
		// Open until the handler's side calls Ack or Nack. A lost lease, a
		// handler timeout or the end of the shutdown grace settles it here.
		select {
		case <-d.finished:
			return
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	case err == nil:
		// Done, even if shutdown cancelled the ctx meanwhile: ack it.
	case errors.Is(context.Cause(ctx), ErrShuttingDown):
		// Interrupted by the end of the shutdown grace: not a failure.
		err = ErrShuttingDown
	case ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)):
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	_ = d.finish(context.Background(), err)
}

// maxHold is the furthest ahead of the worker's clock that a task's due
// time may lie and the task still be held: shard.MaxPrefetch plus 50ms of
// clock jitter. A variable for tests only.
var maxHold = shard.MaxPrefetch + 50*time.Millisecond

// hold waits until the task is due if the scheduler moved it ahead of
// its due time (scheduler.prefetch), on the local clock; it reports
// whether it waited. If ctx ends first (the shutdown grace ran out, or the
// lease was lost) it returns the error to settle the delivery with
// instead of running it: ErrShuttingDown gives the task back.
func (d *delivery) hold(ctx context.Context) (bool, error) {
	wait := time.Until(d.startAt)
	if wait <= 0 {
		return false, nil
	}
	d.q.met.held.Inc()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		err := context.Cause(ctx)
		if errors.Is(err, ErrShuttingDown) {
			err = ErrShuttingDown
		}
		return true, err
	}
}

// call runs the handler, turning a panic into an error.
func (d *delivery) call(ctx context.Context) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panic: %v", p)
		}
	}()
	return d.q.h(ctx, d.task)
}

// The watchdog extends the lease every third of it while the delivery is
// open. When the lease can no longer be vouched for (extensions fail until
// the conservative expiry, or Redis says the token is stale), it cancels
// the handler with ErrLeaseLost.
func (d *delivery) wdEvery() time.Duration { return max(d.lease/3, 5*time.Millisecond) }

// wdMargin is how long before the local guarantee ends an extension is due.
func (d *delivery) wdMargin() time.Duration { return min(d.lease/10, 500*time.Millisecond) }

// wdNext is the wait before the next extension: a third of the lease, or
// less when the local guarantee needs renewing sooner. A delivery not
// leased yet waits for its LeaseAfter.
func (d *delivery) wdNext() time.Duration {
	if d.unleased.Load() {
		// LeaseAfter after the handler starts, but never later than
		// MaxLeaseAfter after the pop, as for a task run at once: a task
		// held until its due time, too, is leased well within
		// shard.UnleasedGrace of its pop.
		at := d.startAt.Add(d.q.opts.LeaseAfter)
		if last := d.sd.Leased.Add(MaxLeaseAfter); last.Before(at) {
			at = last
		}
		return max(time.Until(at), time.Millisecond)
	}
	untilDue := time.Until(time.Unix(0, d.validUntil.Load())) - d.wdMargin()
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
	d.w.ticks.Add(1)
	d.wdMu.Unlock()
	defer d.w.ticks.Done()
	if d.unleased.Load() {
		d.leaseLate()
		return
	}
	if lim := d.extendUntil.Load(); lim != 0 && time.Now().UnixNano() > lim {
		d.w.log.Warn("handler outlived its timeout; no longer extending its lease", "task", d.sd.Task.ID, "queue", d.q.name)
		return
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), max(d.wdEvery(), 50*time.Millisecond))
	_, err := d.w.store.Extend(ctx, d.sd.Shard, d.sd.Task.ID, d.sd.Token, d.lease)
	cancel()
	if d.wdDone() {
		return
	}
	switch {
	case err == nil:
		d.validUntil.Store(sent.Add(d.lease).UnixNano())
		d.refreshPermit()
	case errors.Is(err, shard.ErrStaleToken):
		d.w.met.stale.WithLabelValues(d.q.name).Inc()
		d.lost("lease taken back by recovery")
		return
	default:
		if time.Now().Add(d.wdMargin()).UnixNano() >= d.validUntil.Load() {
			d.lost("lease expired while Redis was unreachable: " + err.Error())
			return
		}
	}
	d.rearm(d.wdNext())
}

// unleasedMargin is how long before shard.UnleasedGrace runs out a worker
// that could not lease a running task gives it up.
const unleasedMargin = 200 * time.Millisecond

// leaseLate leases a delivery whose handler outlived LeaseAfter (on the
// watchdog timer's goroutine, counted in w.ticks). The claim presents the
// popped entry's number: if the task is no longer pending under it
// (cancelled, or taken back by recovery after UnleasedGrace) the handler
// is cancelled as on a lost lease. A failed claim is retried (claimPopped)
// until shortly before UnleasedGrace has passed since the pop; then the
// handler is cancelled too, since recovery may take the task back.
func (d *delivery) leaseLate() {
	ds, sent, err := d.w.claimPopped(d.sd.Leased, d.sd.Shard, d.q.name, []string{d.sd.Ref()}, d.q.opts.Lease)
	if d.wdDone() {
		return
	}
	switch {
	case err != nil:
		d.lost("could not lease the task within " + shard.UnleasedGrace.String() + " of its pop: " + err.Error())
		return
	case len(ds) != 1 || ds[0].Token != d.sd.Token:
		d.w.met.stale.WithLabelValues(d.q.name).Inc()
		d.lost("task no longer pending: cancelled, or taken back by recovery")
		return
	}
	d.validUntil.Store(sent.Add(d.lease).UnixNano())
	d.unleased.Store(false)
	d.q.met.lateLeases.Inc()
	d.rearm(d.wdNext())
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

func (d *delivery) lost(why string) {
	d.w.met.leaseLost.WithLabelValues(d.q.name).Inc()
	d.w.log.Warn("lease lost; cancelling handler", "task", d.sd.Task.ID, "queue", d.q.name, "reason", why)
	if d.cancel != nil {
		d.cancel(ErrLeaseLost)
	}
}

// finish settles the delivery once: ack (err nil), release (shutdown),
// or nack. A later call asking for the same outcome gets the first
// result; one asking for another gets ErrAlreadySettled.
func (d *delivery) finish(_ context.Context, err error) error {
	first := false
	d.once.Do(func() {
		first = true
		d.stopWatchdog()
		d.outcome = outcomeOf(err)
		// A successful handler's slot is free once it returned: the ack
		// is bookkeeping, and it goes out in a batch whose round trip the
		// next task need not wait for. At most Concurrency acks may be
		// outstanding this way (a slow Redis holds slots again), and a
		// queue under flow control keeps its slot and permit until the
		// ack landed, so the cluster-wide bound holds.
		early := d.outcome == outcomeAck && d.permit == nil && d.q.settleEarly()
		if early {
			d.q.running.Add(-1)
			d.w.slotFreed(d.q)
		}
		// An ack that still holds its slot (or permit) must not linger.
		d.result = d.settle(err, !early)
		d.w.releasePermit(d.q, d.permit)
		close(d.finished)
		if early {
			d.q.settling.Add(-1)
		} else {
			d.q.running.Add(-1)
			d.w.slotFreed(d.q)
		}
	})
	if !first && d.outcome != outcomeOf(err) {
		return fmt.Errorf("%w: %s", ErrAlreadySettled, d.outcome)
	}
	return d.result
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

// settle records the outcome in Redis, retrying transient errors for up
// to opTimeout so a short network cut does not cost a lease expiry.
func (d *delivery) settle(herr error, urgent bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		err := d.settleOnce(ctx, herr, urgent)
		if err == nil || errors.Is(err, ErrStaleToken) || ctx.Err() != nil {
			if err != nil && !errors.Is(err, ErrStaleToken) {
				// The lease will expire and recovery will redeliver the task.
				d.w.log.Error("could not record delivery outcome; the task will be redelivered after its lease",
					"task", d.sd.Task.ID, "queue", d.q.name, "error", err)
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

func (d *delivery) settleOnce(ctx context.Context, herr error, urgent bool) error {
	m, qn, id := d.w.met, d.q.name, d.sd.Task.ID
	var err error
	switch {
	case herr == nil:
		a := shard.AckArgs{Shard: d.sd.Shard, ID: id, Token: d.sd.Token}
		if d.unleased.Load() {
			a.Queue = qn
		}
		if err = d.w.acks.ack(ctx, a, urgent); err == nil {
			d.q.met.acks.Inc()
		}
	case errors.Is(herr, ErrShuttingDown):
		if err = d.w.store.Release(ctx, d.sd.Shard, id, qn, d.sd.Token); err == nil {
			m.released.WithLabelValues(qn).Inc()
		}
	default:
		a := shard.NackArgs{Err: herr.Error(), Rand: rand.Float64(), Backoff: shard.Backoff(d.q.opts.Backoff)}
		if d.unleased.Load() {
			a.Queue = qn
		}
		var nr noRetryError
		var ra retryAfterError
		switch {
		case errors.As(herr, &nr):
			a.Dead = true
		case errors.As(herr, &ra):
			a.RetryAfter = max(ra.d, time.Millisecond)
		}
		var res shard.NackResult
		if res, err = d.w.store.Nack(ctx, d.sd.Shard, id, d.sd.Token, a); err == nil {
			m.nacks.WithLabelValues(qn).Inc()
			if res.Dead {
				m.dead.WithLabelValues(qn).Inc()
				d.w.log.Warn("task dead-lettered", "task", id, "queue", qn, "attempts", res.Attempts, "error", herr)
			} else {
				m.retries.WithLabelValues(qn).Inc()
				d.w.log.Debug("task will be retried", "task", id, "queue", qn, "attempts", res.Attempts, "due", res.Due, "error", herr)
			}
		}
	}
	if errors.Is(err, shard.ErrStaleToken) {
		m.stale.WithLabelValues(qn).Inc()
		d.w.log.Warn("delivery no longer current; its outcome was not recorded", "task", id, "queue", qn)
		return ErrStaleToken
	}
	return err
}
