package worker

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/history"
	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/tracectx"
	"github.com/hourglass-sched/hourglass/internal/version"
)

// The worker in reading order: this file (the Worker and its lifecycle),
// queue.go (queues, handler slots, flow control), fetch.go (blocking
// pops), claim.go (leasing popped entries and starting deliveries),
// delivery.go (a delivery's run: hold, call, outcome), watchdog.go (the
// lease while it runs), settle.go (ack, nack, release), acker.go (acks in
// batches).

// opTimeout bounds each Redis call made on a delivery's behalf (claim,
// ack, nack, extend, release).
const opTimeout = 5 * time.Second

// Worker consumes the queues registered with Handle. Build it with New.
type Worker struct {
	rdb  redis.UniversalClient // for the queues' flow-control primitives
	cfg  Config
	deps *deps

	mu      sync.Mutex
	queues  map[string]*queue
	started bool

	freed chan struct{} // a handler slot of any queue was freed (capacity 1)
	// shareGen counts the changes of the queues' shares (applyShare):
	// the fetch loops' key rings are built anew after one.
	shareGen atomic.Uint64
	// shareChanged tells the share clock (shareClock) that a share
	// changed (capacity 1).
	shareChanged chan struct{}
	// recheckSetup asks checkSetup to look at once (capacity 1).
	recheckSetup chan struct{}
	// popper pops for the fetch loops: one BLMPOP on a single node, per-node
	// scripts and ready announcements on a Redis Cluster (clusterpop.go).
	// Set by fetch before its loops start.
	popper popper
	// blocking is the single-node popper (blockpop.go), made by New so
	// that a change of the layout can interrupt its pops in flight.
	blocking *blockingPopper

	// hooks for tests in this package.
	afterPop func(ids []string) bool // false: drop the ids (simulates a crash before claiming)
}

// deps are what a delivery needs besides its queue: a narrow set, so that
// a delivery depends on them and not on the Worker.
type deps struct {
	store *shard.Store
	// layout follows the layout record (the shard count): the fetch loops
	// pop the shards of its span from their next pop on.
	layout *shard.Follower
	acks   *acker
	met    *metrics
	log    hclog.Logger
	now    func() time.Time // the local clock
	// clock maps due times to the local clock, on the clocks of the
	// Redis servers that hold them.
	clock *redisClock
	// ticks counts lease extensions in flight (watchdog timer callbacks);
	// Run waits for them before it returns.
	ticks sync.WaitGroup
	// maxHold is the furthest ahead of the local clock that a task's due
	// time may lie and the task still be held (shard.MaxHold; a test may
	// raise it on its own Worker).
	maxHold time.Duration
	// tracer makes the handlers' spans; nil when tracing is off
	// (Config.TracerProvider).
	tracer trace.Tracer
	// hist counts starts and outcomes per queue and minute
	// (internal/history); nil with Config.NoHistory.
	hist *history.Recorder
}

// New returns a Worker on rdb.
func New(rdb redis.UniversalClient, cfg Config) (*Worker, error) {
	if rdb == nil {
		return nil, invalid("nil redis client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l, err := shard.NewLayout(cfg.Namespace, cfg.Shards)
	if err != nil {
		return nil, invalid("%w", err)
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, errtext.Errorf("register metrics: %w", err)
	}
	store := shard.NewStore(rdb, l)
	log := cfg.Logger.Named("worker")
	blocking := newBlockingPopper(rdb, store, procs.ConnName(cfg.Namespace, cfg.ProcessID))
	shareChanged := make(chan struct{}, 1)
	follow, err := store.Follow(shard.FollowConfig{Refresh: cfg.LayoutRefresh, Logger: log, OnChange: func(_, after shard.Layout) {
		log.Info("layout changed: popping the shards that exist now", "shards", after.Shards(), "span", after.Existing())
		// Pops blocked on the old shards' lists end now; the next ones
		// cover the new shards. A share splits the new count anew.
		blocking.interrupt()
		select {
		case shareChanged <- struct{}{}:
		default:
		}
	}})
	if err != nil {
		return nil, invalid("%w", err)
	}
	k := &deps{
		store:   store,
		layout:  follow,
		acks:    newAcker(store, cfg.AckLinger),
		met:     met,
		log:     log,
		now:     time.Now,
		maxHold: shard.MaxHold,
	}
	if !cfg.NoHistory {
		k.hist = history.NewRecorder(store, log)
	}
	if cfg.TracerProvider != nil {
		k.tracer = cfg.TracerProvider.Tracer(tracectx.Instrumentation, trace.WithInstrumentationVersion(version.Short()))
	}
	k.clock = newRedisClock(store, func() time.Time { return k.now() }, log) // k.now: a test may move the clock
	return &Worker{
		rdb:          rdb,
		cfg:          cfg,
		deps:         k,
		queues:       map[string]*queue{},
		freed:        make(chan struct{}, 1),
		shareChanged: shareChanged,
		recheckSetup: make(chan struct{}, 1),
		blocking:     blocking,
	}, nil
}

// Handle registers h for queue. It must be called before Run.
func (w *Worker) Handle(name string, h Handler, opts QueueOptions) error {
	if !shard.ValidQueue(name) {
		return invalid("queue name %q must match %s", name, shard.QueueRule)
	}
	if h == nil {
		return invalid("nil handler for queue %q", name)
	}
	if err := opts.Validate(); err != nil {
		return errtext.Errorf("queue %q: %w", name, err)
	}
	q, err := w.newQueue(name, h, opts.withDefaults())
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return invalid("Handle after Run")
	}
	if _, dup := w.queues[name]; dup {
		return invalid("queue %q registered twice", name)
	}
	w.queues[name] = q
	return nil
}

// queue returns the registered queue name, or nil.
func (w *Worker) queue(name string) *queue {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queues[name]
}

// Ready checks that the Redis nodes holding the shards the worker pops
// answer a PING within ctx: on a Redis Cluster each primary serving one
// of those shards (every shard of the current layout), elsewhere the one
// server. It returns nil, or the nodes that did not answer with the
// shards each serves; a health endpoint can report it (cmd/worker's
// /readyz does).
func (w *Worker) Ready(ctx context.Context) error {
	n := w.deps.store.Layout().Existing()
	shards := make([]int, n)
	for i := range shards {
		shards[i] = i
	}
	return w.deps.store.PingShards(ctx, shards)
}

// Run consumes tasks until ctx ends, then shuts down gracefully (see the
// package documentation) and returns nil. It returns an error for a
// worker that cannot start (ErrInvalidConfig), and a *RegistrationError
// (ErrNotRegistered), after the same graceful shutdown, when a queue
// given to Handle is still registered by no scheduler in the worker's
// namespace once Config.RegistrationWait has passed.
//
// Shutdown order: the fetch loops stop; claims in flight finish (each
// popped id is then running, settled or left for recovery); running
// handlers get the grace period, then their ctx is cancelled and their
// tasks released; lease extensions in flight finish; the acker sends what
// is queued and stops.
func (w *Worker) Run(ctx context.Context) error {
	queues, err := w.start()
	if err != nil {
		return err
	}
	// Everything below runs under ctx, which the setup check ends early
	// (with its error as the cause) when the queues are not registered.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	// Handlers run under hctx, which outlives ctx by the shutdown grace.
	hctx, stopHandlers := context.WithCancelCause(context.Background())
	defer stopHandlers(nil)
	run := &runState{hctx: hctx, active: map[*delivery]struct{}{}}
	// The process registry (package procs): its entry is written now and
	// when the busy slots change, and deleted when Run returns.
	slots := map[string]int{}
	for _, q := range queues {
		slots[q.name] = q.opts.Concurrency
	}
	me := procs.Self(w.cfg.ProcessID, procs.RoleWorker, w.cfg.Version, slots)
	me.Tags, me.Routes = w.cfg.Tags, true
	me.Named = w.namesConnections(ctx)
	self := procs.New(w.rdb, w.cfg.Namespace, me)
	run.onBusy = self.SetBusy
	registered := make(chan struct{})
	go func() {
		defer close(registered)
		self.Run(ctx, func(err error) {
			if err != nil {
				w.deps.log.Warn("process registry: could not write this worker's entry; trying again", "error", err)
			} else {
				w.deps.log.Info("process registry: this worker's entry written again")
			}
		})
	}()
	defer func() { <-registered }()

	defer func() { // after the acks: what they counted goes too
		hctx, cancel := context.WithTimeout(context.Background(), history.FlushTimeout)
		defer cancel()
		_ = w.deps.hist.Close(hctx)
	}()
	w.deps.acks.start()
	defer w.deps.acks.stop() // after the handlers: their acks go out first
	w.deps.log.Info("worker started", "queues", len(queues), "shards", w.cfg.Shards)
	// The fetch loops run beside this goroutine, so that the shutdown
	// grace starts at the signal (ctx ending): a blocking pop in flight
	// is ended at once (CLIENT UNBLOCK, blockpop.go; on a Ring it comes
	// back within FetchTimeout), and what it popped is given back at
	// once.
	checked := make(chan struct{})
	var setupErr *RegistrationError // set before checked closes
	go func() {
		defer close(checked)
		if setupErr = w.checkSetup(ctx, queues); setupErr != nil {
			fail(setupErr)
		}
	}()
	// The shard count first, then paused queues, which start nothing from
	// the first fetch on (paused.go).
	w.checkLayout(ctx)
	w.readControls(ctx, queues)
	w.readKeeps(ctx, queues)
	followed := make(chan struct{})
	go func() { defer close(followed); w.deps.layout.Run(ctx) }()
	defer func() { <-followed }()
	watched := make(chan struct{})
	go func() { defer close(watched); w.watchPauses(ctx, queues, run) }()
	defer func() { <-watched }()
	fetched := make(chan struct{})
	go func() {
		defer close(fetched)
		w.fetch(ctx, queues, run)
		run.claims.Wait() // every popped id is now running, settled or left for recovery
	}()
	<-ctx.Done()
	w.shutdown(run, stopHandlers)
	<-fetched
	w.deps.ticks.Wait() // lease extensions still in flight (each bounded by its timeout)
	<-checked           // returned when ctx ended, if not before
	if setupErr != nil {
		w.deps.log.Info("worker stopped: queues not registered", "queues", setupErr.Missing)
		return setupErr
	}
	w.deps.log.Info("worker stopped")
	return nil
}

// namesConnections reports whether the client names its connections
// for this worker (procs.ConnName: the worker binary's do, or a client
// given it as ClientName): one CLIENT GETNAME at start. Otherwise the
// worker names only its blocking pops' connections.
func (w *Worker) namesConnections(ctx context.Context) bool {
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	name, err := w.rdb.ClientGetName(cctx).Result()
	return err == nil && name == procs.ConnName(w.cfg.Namespace, w.cfg.ProcessID)
}

// start marks the worker started and returns its queues in name order.
func (w *Worker) start() ([]*queue, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil, invalid("Run called twice")
	}
	w.started = true
	if len(w.queues) == 0 {
		return nil, invalid("no queue registered")
	}
	queues := make([]*queue, 0, len(w.queues))
	for _, q := range w.queues {
		queues = append(queues, q)
	}
	sort.Slice(queues, func(i, j int) bool { return queues[i].name < queues[j].name })
	return queues, nil
}

// shutdown stops new handlers from starting, gives running ones the
// grace period, then cancels them with ErrShuttingDown so that each
// releases its task, and returns once they have (or, for handlers that
// ignore their ctx, after opTimeout).
func (w *Worker) shutdown(run *runState, stopHandlers context.CancelCauseFunc) {
	log := w.deps.log
	log.Info("shutting down; waiting for running handlers", "grace", w.cfg.ShutdownGrace, "running", run.close())
	done := make(chan struct{})
	go func() { run.handlers.Wait(); close(done) }()
	grace := time.NewTimer(w.cfg.ShutdownGrace) // fires at once for NoGrace
	defer grace.Stop()
	select {
	case <-done:
		return
	case <-grace.C:
	}
	log.Warn("shutdown grace over; releasing unfinished tasks", "running", run.count())
	stopHandlers(ErrShuttingDown)
	// Handlers see their ctx cancelled; each finishes by releasing its
	// task. Manual-ack deliveries still open are released here.
	run.releaseOpen()
	select {
	case <-done:
	case <-time.After(opTimeout):
		// Stop extending their leases: recovery will deliver their tasks
		// again once the leases lapse.
		n := run.abandon()
		log.Error("handlers ignore their ctx; returning without them; recovery takes their tasks back once their leases lapse (unleased ones after about a second), counting an attempt", "running", n)
	}
}
