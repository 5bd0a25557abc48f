package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// runWorker starts Run on a worker of cfg handling queues (with a handler
// that counts its tasks); Run's error is sent on the channel returned,
// and the test's end stops it.
func runWorker(t *testing.T, rdb redis.UniversalClient, cfg Config, ran *atomic.Int64, queues ...string) <-chan error {
	t.Helper()
	cfg.Shards, cfg.FetchTimeout, cfg.ShutdownGrace, cfg.Registerer = shards, time.Second, time.Second, prometheus.NewRegistry()
	w, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		if err := w.Handle(q, func(context.Context, *Task) error { ran.Add(1); return nil }, QueueOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	result, returned := make(chan error, 1), make(chan struct{})
	go func() { defer close(returned); result <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-returned })
	return result
}

// A worker pointed at the wrong namespace, or handling a queue no
// scheduler registered, stops once its RegistrationWait has passed: Run
// returns ErrNotRegistered, its message naming the namespace, the missing
// queues and what is registered (in its namespace, and in the default
// one when the worker's differs), instead of returning nil at shutdown
// after consuming nothing.
func TestWorkerWrongNamespaceFailsFast(t *testing.T) {
	t.Parallel()
	// The "schedulers" registered "q" in namespace ns, and "mail" in the
	// default namespace.
	e := newEnv(t, shardtest.Policy())
	def, _ := shard.NewLayout(DefaultNamespace, 4)
	if err := shard.NewStore(e.RDB, def).RegisterQueues(testenv.Ctx(t, 10*time.Second), map[string]shard.QueuePolicy{"mail": shardtest.Policy()}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, namespace string
		queues          []string
		missing         []string
		registered      []string            // in the worker's namespace
		elsewhere       map[string][]string // in the default namespace
		says            []string
	}{
		{"wrong namespace", "nobody", []string{"q"}, []string{"q"}, []string{}, nil,
			[]string{`"q" in namespace "nobody"`, `namespace "nobody" has no registered queue at all`}},
		{"wrong namespace that the default one has", "wtest-typo", []string{"q", "mail"}, []string{"mail", "q"}, []string{}, map[string][]string{DefaultNamespace: {"mail"}},
			[]string{`"mail", "q" in namespace "wtest-typo"`, `namespace "hourglass" registers "mail"`}},
		{"queue never registered", ns, []string{"q", "qq"}, []string{"qq"}, []string{"q"}, nil,
			[]string{`"qq" in namespace "wtest"`, `namespace "wtest" registers "q"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var ran atomic.Int64
			started := time.Now()
			done := runWorker(t, e.RDB, Config{Namespace: c.namespace, RegistrationWait: 300 * time.Millisecond}, &ran, c.queues...)
			var err error
			select {
			case err = <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Run still running 15s after a RegistrationWait of 300ms")
			}
			t.Logf("after %s: %v", time.Since(started).Round(time.Millisecond), err)
			var re *RegistrationError
			if !errors.Is(err, ErrNotRegistered) || !errors.As(err, &re) {
				t.Fatalf("Run: %v, want ErrNotRegistered", err)
			}
			if re.Namespace != c.namespace || !slices.Equal(re.Missing, c.missing) || !slices.Equal(re.Registered, c.registered) ||
				fmt.Sprint(re.Elsewhere) != fmt.Sprint(c.elsewhere) || re.Waited < 300*time.Millisecond {
				t.Errorf("error fields %#v", *re)
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message does not say %s", s)
				}
			}
		})
	}
}

// A worker started before the scheduler registered its queue waits for
// it (a rolling deploy): the queue registered within RegistrationWait is
// consumed and Run keeps running past the wait.
func TestWorkerWaitsForRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	var ran atomic.Int64
	const wait = 2 * time.Second
	done := runWorker(t, e.RDB, Config{Namespace: ns, RegistrationWait: wait}, &ran, "q", "late")
	time.Sleep(wait / 4)
	e.Register(map[string]shard.QueuePolicy{"late": shardtest.Policy()})
	e.Schedule("late", 0, "late-1")
	testenv.WaitFor(t, 10*time.Second, "the late queue's task run", func() (bool, string) {
		return ran.Load() == 1, fmt.Sprint(ran.Load())
	})
	select {
	case err := <-done:
		t.Fatalf("Run returned %v though every queue was registered within the wait", err)
	case <-time.After(wait + 2*registrationPoll):
	}
}

// A registration that could not be read decides nothing: a worker that
// cannot reach Redis until after its RegistrationWait keeps running, and
// fails at the first read that shows the queue missing.
func TestRegistrationDecidedByARead(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	proxy := testenv.StartProxy(t, e.Redis.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() }) // after the worker, which runWorker stops at cleanup
	proxy.Cut()
	var ran atomic.Int64
	done := runWorker(t, rdb, Config{Namespace: "nobody", RegistrationWait: 100 * time.Millisecond}, &ran, "q")
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while Redis could not be reached", err)
	case <-time.After(2 * time.Second):
	}
	proxy.Restore()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), `"q" in namespace "nobody"`) {
			t.Fatalf("Run: %v, want ErrNotRegistered naming q and the namespace", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run still running 15s after Redis came back")
	}
}

// A worker whose Redis user may not read its namespace's keys (an ACL
// written for another namespace) fails the same way, saying so, instead
// of retrying reads that Redis refuses.
func TestRegistrationDeniedFailsFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	ctx := testenv.Ctx(t, 10*time.Second)
	// A user for namespace ns only, as docs/operations.md's ACLs are.
	if err := e.RDB.Do(ctx, "ACL", "SETUSER", "w", "on", ">pw", "resetkeys", "~{"+ns+":*", "~{"+ns+"}:*", "resetchannels", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: e.Redis.Addr, Username: "w", Password: "pw"})
	t.Cleanup(func() { rdb.Close() }) // after the worker, which runWorker stops at cleanup
	var ran atomic.Int64
	done := runWorker(t, rdb, Config{Namespace: "nobody", RegistrationWait: 100 * time.Millisecond}, &ran, "q")
	select {
	case err := <-done:
		t.Log(err)
		var re *RegistrationError
		if !errors.As(err, &re) || !errors.Is(err, ErrNotRegistered) || !denied(re.Denied) ||
			!strings.Contains(err.Error(), `"q" in namespace "nobody"`) || !strings.Contains(err.Error(), "may not read the namespace's registry (") {
			t.Fatalf("Run: %v, want ErrNotRegistered saying the user may not read the registry", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run still running 15s after a RegistrationWait of 100ms")
	}
}

// RegistrationWait: 0 means DefaultRegistrationWait, as DefaultConfig
// has it; a negative wait is refused.
func TestRegistrationWaitDefault(t *testing.T) {
	t.Parallel()
	if got := (Config{}).withDefaults().RegistrationWait; got != DefaultRegistrationWait || DefaultConfig().RegistrationWait != DefaultRegistrationWait {
		t.Fatalf("zero RegistrationWait became %s, DefaultConfig's is %s; want %s", got, DefaultConfig().RegistrationWait, DefaultRegistrationWait)
	}
	if err := (Config{RegistrationWait: -time.Second}).Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "RegistrationWait") {
		t.Fatalf("negative RegistrationWait: %v", err)
	}
}
