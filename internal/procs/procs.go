// Package procs is the registry of the live Hourglass processes of a
// namespace: the schedulers and workers, what they run and how busy they
// are (docs/operations.md, "Processes").
//
// It costs an idle deployment almost nothing: a process writes its entry
// (field <id> of the hash "{<ns>}:procs", JSON) when it starts, when its
// number of busy handler slots changes (at most once per MinWrite),
// otherwise once per Refresh (10 minutes), and deletes it when it stops.
// Whether it is alive is read from Redis itself: every connection of a
// process carries the client name ConnName(ns, id) (set on connect), and
// a process is alive while one of its connections has sent a command
// within the silence bound (Silence: a worker's blocking fetch returns
// every worker.fetch_timeout, every pub/sub connection is pinged once a
// minute). A killed process's connections close, so it disappears at
// once; a paused or cut-off one when the bound has passed. List reads
// the entries and CLIENT LIST of every primary and writes nothing; a
// starting process deletes the entries not written for two Refresh
// periods, and a stopping one its own: the hash stays bounded.
package procs

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// The roles of a process.
const (
	RoleScheduler = "scheduler"
	RoleWorker    = "worker"
)

const (
	// Silence is how long a process may send no command on any of its
	// connections and still be listed: above a minute, the longest a live
	// process is quiet (its pub/sub connections are pinged once a
	// minute; a worker's blocking fetch returns within its fetch
	// timeout, at most a minute).
	Silence = 90 * time.Second
	// MinWrite is the least time between two writes of an entry's busy
	// slots: a busy worker writes at most once per MinWrite.
	MinWrite = 5 * time.Second
	// Refresh is the longest a process goes without writing its entry:
	// an entry deleted while the process was cut off for longer than the
	// silence bound is back within it. An idle deployment's only cost,
	// one HSET per process each 10 minutes.
	Refresh = 10 * time.Minute
	// BusyRefresh is how often a process whose connections are not all
	// named (Entry.Named) writes its entry while a handler runs: a busy
	// worker may pop nothing for longer than Silence.
	BusyRefresh = time.Minute
)

// Entry is what a process says of itself.
type Entry struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Version string `json:"version"`
	// Tags are a worker's tags (worker.Config.Tags): what a queue's
	// routing admits or excludes, with Version.
	Tags []string `json:"tags,omitempty"`
	// Routes says a worker applies the queues' routing (a worker built
	// before routing existed ignores it, and takes every queue's tasks).
	Routes  bool      `json:"routes,omitempty"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Queues are the queues it serves; for a worker, each with its
	// handler slots (concurrency), for a scheduler 0.
	Queues map[string]int `json:"queues"`
	// Slots is a worker's handler slots in all, Busy how many run a
	// handler (at the last write).
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Updated is when the entry was written.
	Updated time.Time `json:"updated"`
	// Named says that every connection of the process carries its name
	// (ConnName; the binaries'). An embedded worker whose client does not
	// name them names only those of its blocking pops; it is then also
	// listed while its entry is newer than the silence bound.
	Named bool `json:"named"`
}

// Process is a listed process: its entry, and what Redis says of its
// connections.
type Process struct {
	Entry
	// Conns is the number of its connections, on every primary.
	Conns int `json:"conns"`
	// Quiet is how long ago the most recent command on any of them was
	// sent (CLIENT LIST's idle, in whole seconds).
	Quiet time.Duration `json:"quiet"`
}

// Key returns the registry's hash of namespace ns.
func Key(ns string) string { return "{" + ns + "}:procs" }

// ConnName returns the client name the connections of process id of
// namespace ns carry: "hg|<ns>|<id>", with every byte Redis does not take
// in a client name (a space, a control character, a byte above '~')
// replaced by '_'.
func ConnName(ns, id string) string {
	return "hg|" + clean(ns) + "|" + clean(id)
}

func clean(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < '!' || c > '~' {
			b[i] = '_'
		}
	}
	return string(b)
}

// DefaultID returns an id for a process that was given none:
// "<host>-<pid>-<4 hex digits>" (the digits tell apart two in one
// process).
func DefaultID() string {
	host, _ := os.Hostname()
	return clean(host) + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(uint64(rand.Uint32()&0xffff|0x10000), 16)[1:]
}

// Self returns the entry of this process: its host name and pid, started
// now.
func Self(id, role, version string, queues map[string]int) Entry {
	host, _ := os.Hostname()
	slots := 0
	for _, n := range queues {
		slots += n
	}
	return Entry{ID: id, Role: role, Version: version, Host: host, PID: os.Getpid(),
		Started: time.Now().UTC().Truncate(time.Second), Queues: queues, Slots: slots}
}

// Registry writes one process's entry.
type Registry struct {
	rdb redis.UniversalClient
	key string

	mu      sync.Mutex
	e       Entry
	written int       // Busy at the last write, -1 before the first
	last    time.Time // the last write
	changed chan struct{}
}

// New returns the registry of process e of namespace ns.
func New(rdb redis.UniversalClient, ns string, e Entry) *Registry {
	return &Registry{rdb: rdb, key: Key(ns), e: e, written: -1, changed: make(chan struct{}, 1)}
}

// SetBusy records that n handler slots run a handler; Run writes it.
func (r *Registry) SetBusy(n int) {
	r.mu.Lock()
	r.e.Busy = n
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// due returns when the entry is to be written again whether it changed
// or not: Refresh after the last write, BusyRefresh when the process's
// connections are not all named (Entry.Named: an embedded worker that is
// busy, or runs on a Redis Cluster, may send no named connection
// anything; List then lists it by its entry's age).
func (r *Registry) due() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	every := Refresh
	if !r.e.Named {
		every = BusyRefresh
	}
	return r.last.Add(every)
}

// write writes the entry if it changed since the last write or its
// refresh is due.
func (r *Registry) write(ctx context.Context) error {
	force := !time.Now().Before(r.due())
	r.mu.Lock()
	if r.e.Busy == r.written && !force {
		r.mu.Unlock()
		return nil
	}
	r.e.Updated = time.Now().UTC()
	e := r.e
	r.mu.Unlock()
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if err := r.rdb.HSet(ctx, r.key, e.ID, b).Err(); err != nil {
		r.mu.Lock()
		r.written = -1 // sent again, changed or not: what recovers is a write
		r.mu.Unlock()
		return errtext.Errorf("write the process registry: %w", err)
	}
	r.mu.Lock()
	r.written, r.last = e.Busy, e.Updated
	r.mu.Unlock()
	return nil
}

// Run writes the entry at once, then each change of the busy slots, at
// most once per MinWrite, and at least once per Refresh, until ctx ends;
// then it deletes the entry. A write that fails is tried again after
// MinWrite, then after twice as long each time up to Refresh; onErr (may
// be nil) hears of the first failure and of the recovery (nil).
func (r *Registry) Run(ctx context.Context, onErr func(error)) {
	report := func(err error) {
		if onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
	}
	if err := r.prune(ctx); err != nil {
		report(err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = r.rdb.HDel(dctx, r.key, r.e.ID).Err()
		cancel()
	}()
	retry := backoff.Backoff{Min: MinWrite, Max: Refresh}
	failing := false
	for {
		if err := r.write(ctx); err != nil {
			if !failing {
				report(err)
			}
			failing = true
			if !backoff.Sleep(ctx, retry.Next()) {
				return
			}
			continue
		}
		if failing {
			report(nil) // written again
		}
		failing = false
		retry.Reset()
		// At most one write per MinWrite; the changes meanwhile are
		// written together.
		if !backoff.Sleep(ctx, MinWrite) {
			return
		}
		refresh := time.NewTimer(time.Until(r.due()))
		select {
		case <-ctx.Done():
			refresh.Stop()
			return
		case <-r.changed:
			refresh.Stop()
		case <-refresh.C:
		}
	}
}

// prune deletes the entries not written for two Refresh periods: their
// processes are gone (a live one writes at least once per Refresh). So
// a dead process's entry stays at most until a process starts 20
// minutes or more after its last write, and the hash holds the entries
// of the processes alive or gone since the last such start.
func (r *Registry) prune(ctx context.Context) error {
	all, err := r.rdb.HGetAll(ctx, r.key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return errtext.Errorf("read the process registry: %w", err)
	}
	var old []string
	for id, v := range all {
		var e Entry
		if json.Unmarshal([]byte(v), &e) != nil || time.Since(e.Updated) > 2*Refresh {
			old = append(old, id)
		}
	}
	if len(old) == 0 {
		return nil
	}
	if err := r.rdb.HDel(ctx, r.key, old...).Err(); err != nil {
		return errtext.Errorf("drop gone processes from the registry: %w", err)
	}
	return nil
}

// List returns the live processes of namespace ns, in role and id order:
// those whose entry is in the registry and one of whose connections has
// sent a command within silence (Silence when 0), and those whose
// connections are not all named (Entry.Named false) whose entry was
// written within silence. It reads CLIENT LIST of every primary and
// writes nothing.
func List(ctx context.Context, rdb redis.UniversalClient, ns string, silence time.Duration) ([]Process, error) {
	if silence <= 0 {
		silence = Silence
	}
	raw, err := rdb.HGetAll(ctx, Key(ns)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, errtext.Errorf("read the process registry: %w", err)
	}
	conns, err := clientNames(ctx, rdb)
	if err != nil {
		return nil, err
	}
	var out []Process
	for id, v := range raw {
		var e Entry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			continue // Run's prune deletes it
		}
		c := conns[ConnName(ns, id)]
		active := c.n > 0 && c.quiet <= silence
		if active || (!e.Named && time.Since(e.Updated) <= silence) {
			out = append(out, Process{Entry: e, Conns: c.n, Quiet: c.quiet})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Role != out[j].Role {
			return out[i].Role < out[j].Role
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

type connStat struct {
	n     int
	quiet time.Duration
}

// clientNames reads CLIENT LIST of every primary: per client name, the
// connections and the least idle time.
func clientNames(ctx context.Context, rdb redis.UniversalClient) (map[string]connStat, error) {
	out := map[string]connStat{}
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		s, err := c.ClientList(ctx).Result()
		if err != nil {
			return errtext.Errorf("CLIENT LIST: %w", err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, line := range strings.Split(s, "\n") {
			var name string
			idle := -1
			for _, f := range strings.Fields(line) {
				k, v, _ := strings.Cut(f, "=")
				switch k {
				case "name":
					name = v
				case "idle":
					idle, _ = strconv.Atoi(v)
				}
			}
			if name == "" || idle < 0 {
				continue
			}
			st, ok := out[name]
			q := time.Duration(idle) * time.Second
			if !ok || q < st.quiet {
				st.quiet = q
			}
			st.n++
			out[name] = st
		}
		return nil
	}
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		if err := c.ForEachMaster(ctx, read); err != nil {
			return nil, err
		}
	case *redis.Client:
		if err := read(ctx, c); err != nil {
			return nil, err
		}
	default:
		return nil, errtext.Errorf("CLIENT LIST: a %T is not supported", rdb)
	}
	return out, nil
}
