package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// setupCheckEvery is how often a running worker checks again that the
// schedulers registered its queues with its namespace and shard count,
// besides every event of its control-channel subscription (watchPauses:
// a change of the layout, a Redis that came back, which may have lost
// the registrations). It was 1 min: each check reads every shard's
// registration (a command per queue and shard), so two idle workers on
// 16 shards spent 0.55 Redis commands/s on it. The check only logs and
// sets gauges.
const setupCheckEvery = 5 * time.Minute

// registrationPoll is how often the worker looks again while it waits
// for queues to be registered (Config.RegistrationWait).
const registrationPoll = time.Second

// ErrNotRegistered is wrapped by the error Run returns when a queue the
// worker handles is still registered by no scheduler in its namespace
// once Config.RegistrationWait has passed: the namespace is not the
// schedulers', or the queue's name is not one they register. The error
// is a *RegistrationError, whose message names the namespace, the queues
// missing and what is registered.
var ErrNotRegistered = errors.New("hourglass: queue not registered by any scheduler")

// RegistrationError is the error of a Run that stopped because queues
// are not registered (it matches ErrNotRegistered). Its fields are what
// the worker could tell about the mismatch.
type RegistrationError struct {
	// Namespace is the worker's (Config.Namespace).
	Namespace string
	// Missing are the queues the worker handles that no scheduler
	// registered in Namespace, sorted.
	Missing []string
	// Registered are the queues that are registered in Namespace,
	// sorted: none when no scheduler runs with this namespace (nil also
	// when they could not be read).
	Registered []string
	// Elsewhere maps another namespace to those of Missing registered
	// there. Only DefaultNamespace is looked at (a worker that left
	// Namespace unset, or set it while the schedulers did not), and only
	// where the worker's Redis user may read it: the namespaces in use
	// cannot be listed cheaply.
	Elsewhere map[string][]string
	// Denied, when set, is why the registration could not be read: Redis
	// refused the worker's user the keys of Namespace (NOPERM), so the
	// namespace is not the one its ACL was written for (or the ACL lacks
	// the worker's rules, docs/operations.md). Missing then holds every
	// queue, unverified.
	Denied error
	// Waited is how long Run waited for the registration.
	Waited time.Duration
}

// Error names the namespace, the missing queues and what is registered.
func (e *RegistrationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s in namespace %q (waited %s)", ErrNotRegistered, quoteList(e.Missing), e.Namespace, e.Waited.Round(time.Millisecond))
	if e.Denied != nil {
		fmt.Fprintf(&b, "; the worker's Redis user may not read the namespace's registry (%v): is the namespace the one its ACL was written for?", e.Denied)
	}
	switch {
	case e.Registered == nil:
	case len(e.Registered) == 0:
		fmt.Fprintf(&b, "; namespace %q has no registered queue at all: no scheduler runs with it; is the worker's namespace the schedulers'?", e.Namespace)
	default:
		fmt.Fprintf(&b, "; namespace %q registers %s", e.Namespace, quoteList(e.Registered))
	}
	for ns, qs := range e.Elsewhere {
		fmt.Fprintf(&b, "; namespace %q registers %s", ns, quoteList(qs))
	}
	if e.Denied == nil {
		b.WriteString("; register a queue in the schedulers' configuration (queues.<name>) or with hourglass queue set before starting its workers")
	}
	return b.String()
}

// Unwrap returns ErrNotRegistered.
func (e *RegistrationError) Unwrap() error { return ErrNotRegistered }

// quoteList renders names quoted and comma-separated, at most 20 of them.
func quoteList(names []string) string {
	const most = 20
	q := make([]string, 0, min(len(names), most))
	for _, n := range names[:min(len(names), most)] {
		q = append(q, fmt.Sprintf("%q", n))
	}
	s := strings.Join(q, ", ")
	if len(names) > most {
		s += fmt.Sprintf(" and %d more", len(names)-most)
	}
	return s
}

// checkSetup compares the worker's queues, namespace and shard count with
// what the schedulers registered, at start and then every
// setupCheckEvery, and when w.recheckSetup is signalled, until ctx ends: a queue no scheduler registered (or a
// different namespace), or a different shard count, leaves tasks that
// this worker never sees. Each problem is logged when it appears and
// when it clears, and shown by hourglass_worker_queue_registered and
// hourglass_worker_setup_mismatch.
//
// Until every queue has been seen registered in some shard, it looks
// every registrationPoll instead, and returns a *RegistrationError once
// Config.RegistrationWait has passed since start with a queue that no
// shard registers, or with Redis refusing this user the namespace's keys
// (NOPERM; other failed reads decide nothing: the next one does).
// After that, a queue that disappears (Redis lost its data; the
// schedulers register their queues again) is only logged. It returns
// nil when ctx ends.
func (w *Worker) checkSetup(ctx context.Context, queues []*queue) *RegistrationError {
	names := make([]string, len(queues))
	for i, q := range queues {
		names[i] = q.name
	}
	start := w.deps.now()
	deadline := start.Add(w.cfg.RegistrationWait)
	waiting := true // for every queue to be registered
	announced := false
	seen := map[string]string{} // queue -> problem logged
	for {
		cctx, cancel := context.WithTimeout(ctx, opTimeout)
		reg, err := w.deps.store.Registration(cctx, names)
		cancel()
		if err == nil {
			l := w.deps.store.Layout()
			mismatch := 0.0
			var missing []string // in every shard
			for _, q := range queues {
				problem := reg.Problem(q.name, l.Namespace(), l.Shards())
				q.met.registered.Set(flag(len(reg.Missing[q.name]) == 0))
				if problem != "" {
					mismatch = 1
				}
				if len(reg.Missing[q.name]) >= l.Shards() {
					missing = append(missing, q.name)
				}
				switch {
				case problem != "" && seen[q.name] != problem:
					w.deps.log.Warn("setup differs from the schedulers'", "queue", q.name, "problem", problem)
				case problem == "" && seen[q.name] != "":
					w.deps.log.Info("setup now matches the schedulers'", "queue", q.name)
				}
				seen[q.name] = problem
			}
			w.deps.met.mismatch.Set(mismatch)
			switch now := w.deps.now(); {
			case !waiting:
			case len(missing) == 0:
				waiting = false
			case !now.Before(deadline):
				return w.notRegistered(ctx, missing, now.Sub(start))
			case !announced:
				announced = true
				w.deps.log.Warn("waiting for a scheduler to register queues; Run fails if they are still missing then",
					"queues", missing, "namespace", l.Namespace(), "wait", w.cfg.RegistrationWait)
			}
		} else if denied(err) {
			// Decisive too: this user may not read the namespace's keys.
			if waiting && !w.deps.now().Before(deadline) {
				e := w.notRegistered(ctx, names, w.deps.now().Sub(start))
				e.Denied = err
				return e
			}
			if !announced {
				announced = true
				w.deps.log.Warn("Redis refuses this user the queues' registration; Run fails if it still does then",
					"namespace", w.deps.store.Layout().Namespace(), "wait", w.cfg.RegistrationWait, "error", err)
			}
		} else if ctx.Err() == nil {
			w.deps.log.Debug("could not check the queues' registration", "error", err)
		}
		next := setupCheckEvery
		if waiting {
			// Look again at the deadline if it comes first; past it (the
			// reads failed until then) every registrationPoll.
			next = registrationPoll
			if left := deadline.Sub(w.deps.now()); left > 0 {
				next = min(next, left)
			}
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-w.recheckSetup:
			t.Stop()
		}
	}
}

// notRegistered returns the error of a worker whose queues missing are
// registered by no scheduler, with what it can tell of what is
// registered (reads that fail are left out).
func (w *Worker) notRegistered(ctx context.Context, missing []string, waited time.Duration) *RegistrationError {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	ns := w.deps.store.Layout().Namespace()
	e := &RegistrationError{Namespace: ns, Missing: missing, Waited: waited}
	if names, err := w.deps.store.QueueNames(ctx); err == nil {
		e.Registered = names
	}
	if ns != DefaultNamespace {
		l, _ := shard.NewLayout(DefaultNamespace, 1) // shard 0 is every layout's
		if names, err := shard.NewStore(w.rdb, l).QueueNames(ctx); err == nil {
			var there []string
			for _, q := range missing {
				if slices.Contains(names, q) {
					there = append(there, q)
				}
			}
			if len(there) > 0 {
				e.Elsewhere = map[string][]string{DefaultNamespace: there}
			}
		}
	}
	return e
}

// flag is a gauge's value for b.
func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// denied reports whether err is Redis refusing the caller's ACL user a
// key or command (an error reply starting NOPERM).
func denied(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM")
}
