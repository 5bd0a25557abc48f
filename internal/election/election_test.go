package election

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

const (
	testPrefix = "/hg-test/"
	testShards = 16
	testTTL    = 2 * time.Second
	// faultTTL is the lease TTL of the fault-injection tests, which check
	// that a replica stops its work before its lease can expire: the
	// default TTL, whose self-fencing margin (500 ms) is what production
	// runs with. Under MinTTL the margin is 200 ms, which a loaded machine
	// running -race can spend on scheduling alone.
	faultTTL = DefaultTTL
	// settle bounds the waits for liveness (shards owned again, balanced):
	// generous, since a loaded machine may take seconds where an idle one
	// takes milliseconds. The safety checks are on recorded times, not on
	// how long a wait took.
	settle = 30 * time.Second
)

// skipIfShort skips the slow fault-injection tests under -short.
func skipIfShort(t *testing.T) {
	if testing.Short() {
		t.Skip("fault injection; run without -short")
	}
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is the RunFunc of every manager in a test. It checks the two
// safety properties as work starts: a shard runs on at most one manager
// at a time, and a shard's epochs strictly increase.
type recorder struct {
	t *testing.T

	mu        sync.Mutex
	active    map[int]string // shard -> replica running it
	running   int
	lastEpoch map[int]int64
	// returnOnce: shards whose next run returns by itself at once.
	returnOnce map[int]bool
	starts     map[int][]int64 // shard -> epochs in start order
	// on counts each replica's running RunFuncs; stopped is when its last
	// RunFunc returned (when its work stopped, whenever a test looks).
	on      map[string]int
	stopped map[string]time.Time
}

func newRecorder(t *testing.T) *recorder {
	return &recorder{
		t:          t,
		active:     map[int]string{},
		lastEpoch:  map[int]int64{},
		returnOnce: map[int]bool{},
		starts:     map[int][]int64{},
		on:         map[string]int{},
		stopped:    map[string]time.Time{},
	}
}

func (rec *recorder) runFunc(replica string) RunFunc {
	return func(ctx context.Context, shard int, epoch int64) {
		rec.mu.Lock()
		if other, ok := rec.active[shard]; ok {
			rec.t.Errorf("shard %d started on %s (epoch %d) while still running on %s", shard, replica, epoch, other)
		}
		if epoch <= rec.lastEpoch[shard] {
			rec.t.Errorf("shard %d: epoch %d on %s not above previous %d", shard, epoch, replica, rec.lastEpoch[shard])
		}
		rec.lastEpoch[shard] = epoch
		rec.starts[shard] = append(rec.starts[shard], epoch)
		rec.active[shard] = replica
		rec.running++
		rec.on[replica]++
		quit := rec.returnOnce[shard]
		delete(rec.returnOnce, shard)
		rec.mu.Unlock()

		if !quit {
			<-ctx.Done()
		}

		rec.mu.Lock()
		delete(rec.active, shard)
		rec.running--
		if rec.on[replica]--; rec.on[replica] == 0 {
			rec.stopped[replica] = time.Now()
		}
		rec.mu.Unlock()
	}
}

func (rec *recorder) runningCount() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.running
}

// runningOn returns how many RunFuncs of replica have not returned.
func (rec *recorder) runningOn(replica string) int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.on[replica]
}

// stoppedWithin fails the test unless every replica of nodes had stopped
// all its work by within after the fault: the time its last RunFunc
// returned, as recorded, not when a test's poll noticed (a loaded machine
// may poll late). A replica must stop before its lease can expire on
// etcd, at the latest TTL after its last keep-alive, which the fault
// (a crash, etcd paused) came after.
func (rec *recorder) stoppedWithin(t *testing.T, fault time.Time, within time.Duration, nodes ...*node) {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, n := range nodes {
		at, ok := rec.stopped[n.id]
		switch {
		case rec.on[n.id] > 0 || !ok:
			t.Errorf("%s still runs %d shards", n.id, rec.on[n.id])
		case at.Sub(fault) >= within:
			t.Errorf("%s stopped its work %s after the fault, not within %s: another replica may run its shards meanwhile", n.id, at.Sub(fault), within)
		default:
			t.Logf("%s stopped its work %s after the fault (TTL %s)", n.id, at.Sub(fault), within)
		}
	}
}

// node is one manager under test, with its own etcd client.
type node struct {
	id     string
	m      *Manager
	cli    *clientv3.Client
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

func startNode(t *testing.T, e *testenv.Etcd, rec *recorder, id string) *node {
	t.Helper()
	return startNodeWith(t, e, rec, id, nodeOpts{})
}

// startFaultNode is startNode with faultTTL.
func startFaultNode(t *testing.T, e *testenv.Etcd, rec *recorder, id string) *node {
	t.Helper()
	return startNodeWith(t, e, rec, id, nodeOpts{ttl: faultTTL})
}

// nodeOpts changes startNode's defaults.
type nodeOpts struct {
	shards    int                        // Config.Shards; 0 means testShards
	ttl       time.Duration              // Config.TTL; 0 means testTTL (faultTTL: startFaultNode)
	beforeRun func(*testing.T, *Manager) // called between New and Run
}

func startNodeWith(t *testing.T, e *testenv.Etcd, rec *recorder, id string, o nodeOpts) *node {
	t.Helper()
	if o.shards == 0 {
		o.shards = testShards
	}
	if o.ttl == 0 {
		o.ttl = testTTL
	}
	n := &node{id: id, cli: e.Client(t), reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	m, err := New(n.cli, Config{
		Prefix:     testPrefix,
		ReplicaID:  id,
		Shards:     o.shards,
		TTL:        o.ttl,
		Logger:     testLogger(t, id),
		Registerer: n.reg,
	}, rec.runFunc(id))
	if err != nil {
		t.Fatalf("New(%s): %v", id, err)
	}
	n.m = m
	if o.beforeRun != nil {
		o.beforeRun(t, m)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	go func() { n.done <- m.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

// stop cancels the node's Run and waits for it to return.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case err := <-n.done:
		if err != nil {
			t.Errorf("%s: Run = %v", n.id, err)
		}
		n.done <- nil // later stops return at once
	case <-time.After(settle):
		t.Fatalf("%s: Run did not return after cancel", n.id)
	}
}

// metric returns the value of a counter or gauge of the node's registry.
func (n *node) metric(t *testing.T, name, change string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := change == ""
			for _, l := range m.GetLabel() {
				match = match || l.GetName() == "change" && l.GetValue() == change
			}
			if !match {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{change=%q} not found", name, change)
	return 0
}

// testLogger sends a manager's logs to the test log, shown on failure or
// with -v.
func testLogger(t *testing.T, id string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:   id,
		Level:  hclog.Debug,
		Output: testWriter{t},
	})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// balanced reports whether the nodes together own every one of the
// shards [0,shards) exactly once, each node owning floor or ceil of
// shards/len(nodes), and whether etcd's shard keys say the same (owner
// and epoch, and no other key). It returns the ownership.
func balanced(t *testing.T, cli *clientv3.Client, nodes []*node, shards int) (bool, string, map[int]int64) {
	t.Helper()
	lo := shards / len(nodes)
	hi := lo
	if shards%len(nodes) != 0 {
		hi++
	}
	owner := map[int]string{}
	epochs := map[int]int64{}
	var counts []string
	for _, n := range nodes {
		owned := n.m.Owned()
		counts = append(counts, fmt.Sprintf("%s=%d", n.id, len(owned)))
		if len(owned) < lo || len(owned) > hi {
			return false, fmt.Sprintf("counts %v, want %d..%d each", counts, lo, hi), nil
		}
		for s, e := range owned {
			if other, ok := owner[s]; ok {
				return false, fmt.Sprintf("shard %d owned by %s and %s", s, other, n.id), nil
			}
			if e <= 0 {
				return false, fmt.Sprintf("shard %d epoch %d not positive", s, e), nil
			}
			owner[s], epochs[s] = n.id, e
		}
	}
	for s := range owner {
		if s < 0 || s >= shards {
			return false, fmt.Sprintf("shard %d owned by %s, outside 0..%d", s, owner[s], shards-1), nil
		}
	}
	if len(owner) != shards {
		return false, fmt.Sprintf("%d of %d shards owned (%v)", len(owner), shards, counts), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	keys, err := Owners(ctx, cli, testPrefix)
	if err != nil {
		return false, err.Error(), nil
	}
	for s := range shards {
		if k := keys[s]; k.Replica != owner[s] || k.Epoch != epochs[s] {
			return false, fmt.Sprintf("shard %d: etcd says %s@%d, Owned says %s@%d", s, k.Replica, k.Epoch, owner[s], epochs[s]), nil
		}
	}
	if len(keys) != shards {
		return false, fmt.Sprintf("etcd has %d shard keys, want %d (%v)", len(keys), shards, slices.Sorted(maps.Keys(keys))), nil
	}
	return true, "", epochs
}

// waitBalanced waits until balanced holds for testShards shards and
// returns the epochs.
func waitBalanced(t *testing.T, cli *clientv3.Client, nodes []*node, timeout time.Duration) map[int]int64 {
	t.Helper()
	return waitBalancedN(t, cli, nodes, testShards, timeout)
}

// waitBalancedN waits until balanced holds for shards shards and returns
// the epochs.
func waitBalancedN(t *testing.T, cli *clientv3.Client, nodes []*node, shards int, timeout time.Duration) map[int]int64 {
	t.Helper()
	var epochs map[int]int64
	testenv.WaitFor(t, timeout, fmt.Sprintf("%d nodes balanced over %d shards", len(nodes), shards), func() (bool, string) {
		ok, msg, e := balanced(t, cli, nodes, shards)
		epochs = e
		return ok, msg
	})
	return epochs
}

func TestBalanceHandoverRebalance(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	a, b, c := startNode(t, e, rec, "a"), startNode(t, e, rec, "b"), startNode(t, e, rec, "c")

	before := waitBalanced(t, cli, []*node{a, b, c}, settle)
	testenv.WaitFor(t, settle, "members seen by all", func() (bool, string) {
		for _, n := range []*node{a, b, c} {
			if got := n.m.Members(); !slices.Equal(got, []string{"a", "b", "c"}) {
				return false, fmt.Sprintf("%s: Members() = %v", n.id, got)
			}
		}
		return true, ""
	})
	for _, n := range []*node{a, b, c} {
		if !n.m.Ready() {
			t.Errorf("%s not ready", n.id)
		}
		if g := n.metric(t, "hourglass_shards_owned", ""); int(g) != len(n.m.Owned()) {
			t.Errorf("%s: gauge %v, owns %d", n.id, g, len(n.m.Owned()))
		}
	}

	// Graceful hand-over: c shuts down, a and b take 8 each.
	cShards := c.m.Owned()
	start := time.Now()
	c.stop(t)
	after := waitBalanced(t, cli, []*node{a, b}, settle)
	t.Logf("graceful hand-over of %d shards took %s (stop + take-over)", len(cShards), time.Since(start))
	for s, old := range cShards {
		if after[s] <= old {
			t.Errorf("shard %d: epoch %d after hand-over, was %d", s, after[s], old)
		}
	}
	for s, ep := range before {
		if _, moved := cShards[s]; !moved && after[s] != ep {
			t.Logf("shard %d moved between survivors (epoch %d -> %d)", s, ep, after[s])
		}
	}
	if got := c.metric(t, "hourglass_ownership_changes_total", changeReleased); int(got) < len(cShards) {
		t.Errorf("c released counter = %v, want >= %d", got, len(cShards))
	}

	// A replacement joins: back to 6/5/5, then a fourth: 4 each.
	d := startNode(t, e, rec, "d")
	waitBalanced(t, cli, []*node{a, b, d}, settle)
	f := startNode(t, e, rec, "f")
	waitBalanced(t, cli, []*node{a, b, d, f}, settle)
}

func TestCrashTakeover(t *testing.T) {
	t.Parallel()
	skipIfShort(t)
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	a, b, c := startFaultNode(t, e, rec, "a"), startFaultNode(t, e, rec, "b"), startFaultNode(t, e, rec, "c")
	waitBalanced(t, cli, []*node{a, b, c}, settle)

	// Crash c: its client goes away without revoking, so its lease is
	// left to expire on the server. c notices the closed client at its
	// next keep-alive and stops its work then, before the TTL.
	cShards := c.m.Owned()
	start := time.Now()
	if err := c.cli.Close(); err != nil {
		t.Logf("close c's client: %v", err)
	}
	// The manager gives the shards up, then their RunFuncs return: wait
	// for both; the check is on when the work stopped.
	testenv.WaitFor(t, settle, "c to stop its own work", func() (bool, string) {
		o, r := c.m.Owned(), rec.runningOn(c.id)
		return len(o) == 0 && r == 0, fmt.Sprintf("c owns %v, %d RunFuncs still running", o, r)
	})
	rec.stoppedWithin(t, start, faultTTL, c)
	// With its client closed, c can never hold a lease again: Run says
	// so instead of retrying forever.
	select {
	case err := <-c.done:
		if !errors.Is(err, ErrClientClosed) {
			t.Errorf("c: Run = %v after its client closed, want ErrClientClosed", err)
		}
		c.done <- nil // for the cleanup's stop
	case <-time.After(settle):
		t.Fatal("c: Run did not return after its client closed")
	}
	after := waitBalanced(t, cli, []*node{a, b}, settle)
	t.Logf("take-over of %d shards after crash took %s (TTL %s)", len(cShards), time.Since(start), faultTTL)
	for s, old := range cShards {
		if after[s] <= old {
			t.Errorf("shard %d: epoch %d after take-over, was %d", s, after[s], old)
		}
	}
	if c.m.Ready() {
		t.Error("crashed replica still reports Ready")
	}
}

func TestEtcdPauseSelfFencing(t *testing.T) {
	t.Parallel()
	skipIfShort(t)
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	nodes := []*node{startFaultNode(t, e, rec, "a"), startFaultNode(t, e, rec, "b"), startFaultNode(t, e, rec, "c")}
	before := waitBalanced(t, cli, nodes, settle)
	var maxBefore int64
	for _, ep := range before {
		maxBefore = max(maxBefore, ep)
	}

	paused := time.Now()
	e.Pause()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			e.Resume()
		}
	})
	// While etcd is still paused, every replica must stop all work: its
	// lease may expire on the server as soon as etcd runs again, and
	// etcd runs again TTL after the pause. The wait is generous; the
	// check is on when the work stopped.
	testenv.WaitFor(t, settle, "all work stopped while etcd is paused", func() (bool, string) {
		for _, n := range nodes {
			if o := n.m.Owned(); len(o) > 0 || n.m.Ready() {
				return false, fmt.Sprintf("%s owns %d, ready %v", n.id, len(o), n.m.Ready())
			}
		}
		if r := rec.runningCount(); r > 0 {
			return false, fmt.Sprintf("%d RunFuncs still running", r)
		}
		return true, ""
	})
	rec.stoppedWithin(t, paused, faultTTL, nodes...)
	// Keep etcd paused past the TTL: this is the fault being injected,
	// not a wait for a condition.
	time.Sleep(faultTTL + 500*time.Millisecond - time.Since(paused))
	e.Resume()
	resumed = true

	start := time.Now()
	after := waitBalanced(t, cli, nodes, settle)
	t.Logf("all shards owned again %s after resume", time.Since(start))
	for s, ep := range after {
		if ep <= maxBefore {
			t.Errorf("shard %d: epoch %d after resume, not above %d", s, ep, maxBefore)
		}
	}
	for _, n := range nodes {
		if got := n.metric(t, "hourglass_lease_lost_total", ""); got < 1 {
			t.Errorf("%s: lease lost counter = %v, want >= 1", n.id, got)
		}
		if got := n.metric(t, "hourglass_ownership_changes_total", changeLost); got < 1 {
			t.Errorf("%s: lost counter = %v, want >= 1", n.id, got)
		}
	}
}

func TestEtcdRestart(t *testing.T) {
	t.Parallel()
	skipIfShort(t)
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	nodes := []*node{startNode(t, e, rec, "a"), startNode(t, e, rec, "b")}
	before := waitBalanced(t, cli, nodes, settle)

	e.Kill()
	testenv.WaitFor(t, settle, "all work stopped while etcd is down", func() (bool, string) {
		for _, n := range nodes {
			if o := n.m.Owned(); len(o) > 0 {
				return false, fmt.Sprintf("%s owns %d", n.id, len(o))
			}
		}
		return rec.runningCount() == 0, "RunFuncs still running"
	})
	e.Restart()
	start := time.Now()
	after := waitBalanced(t, cli, nodes, settle)
	t.Logf("all shards owned again %s after etcd restart", time.Since(start))
	for s, ep := range after {
		if ep <= before[s] {
			t.Errorf("shard %d: epoch %d after restart, was %d", s, ep, before[s])
		}
	}
}

func TestRunFuncReturnReleases(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	cli := e.Client(t)
	rec := newRecorder(t)
	rec.returnOnce[3] = true
	a := startNode(t, e, rec, "a")

	var first int64
	testenv.WaitFor(t, settle, "shard 3 to be re-acquired", func() (bool, string) {
		rec.mu.Lock()
		starts := slices.Clone(rec.starts[3])
		rec.mu.Unlock()
		if len(starts) < 2 {
			return false, fmt.Sprintf("shard 3 started %d times", len(starts))
		}
		first = starts[0]
		ep, ok := a.m.Owned()[3]
		return ok && ep == starts[len(starts)-1], fmt.Sprintf("starts %v, owned %v", starts, a.m.Owned())
	})
	if ep := a.m.Owned()[3]; ep <= first {
		t.Errorf("shard 3 epoch %d after re-acquire, first was %d", ep, first)
	}
	if got := a.metric(t, "hourglass_ownership_changes_total", changeReleased); got < 1 {
		t.Errorf("released counter = %v, want >= 1", got)
	}
	waitBalanced(t, cli, []*node{a}, settle)
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	rec := newRecorder(t)
	a := startNode(t, e, rec, "a")
	testenv.WaitFor(t, settle, "a ready", func() (bool, string) { return a.m.Ready(), "not ready" })
	if err := a.m.Run(context.Background()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run = %v, want ErrAlreadyRunning", err)
	}
}

func TestRegistererConflict(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t)
	reg := prometheus.NewRegistry()
	cfg := Config{Prefix: testPrefix, ReplicaID: "a", Shards: 1, Registerer: reg}
	run := func(context.Context, int, int64) {}
	if _, err := New(e.Client(t), cfg, run); err != nil {
		t.Fatalf("first New: %v", err)
	}
	if _, err := New(e.Client(t), cfg, run); err == nil {
		t.Fatal("second New on the same Registerer succeeded")
	}
}
