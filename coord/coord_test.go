package coord

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(condRoleEnv); role != "" {
		os.Exit(condHelper(role)) // a process of TestCondAcrossProcesses
	}
	goleak.VerifyTestMain(m)
}

// setup starts a redis-server for the test and returns a client and a
// context bounded to the test.
func setup(t *testing.T) (*redis.Client, context.Context) {
	t.Helper()
	r := testenv.StartRedis(t)
	return r.Client(t), testenv.Ctx(t, 2*time.Minute)
}

// waitWaiting waits until n acquirers of rdb are blocked on channel.
func waitWaiting(t *testing.T, rdb redis.UniversalClient, channel string, n int) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, "blocked acquirers", func() (bool, string) {
		got := waiting(rdb, channel)
		return got == n, "waiting: " + strconv.Itoa(got)
	})
}

// noHub checks that no pub/sub hub is left for rdb: every waiter closed.
func noHub(t *testing.T, rdb redis.UniversalClient) {
	t.Helper()
	hubs.Lock()
	defer hubs.Unlock()
	if h := hubs.m[rdb]; h != nil {
		t.Fatalf("a wake hub is still open for the client (refs %d)", h.refs)
	}
}

// isClosed reports whether c is closed.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// mustTimeOut calls acquire (which must block: the resource is held)
// under a 150 ms deadline and wants context.DeadlineExceeded.
func mustTimeOut(t *testing.T, ctx context.Context, what string, acquire func(context.Context) error) {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if err := acquire(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%s past its deadline: %v", what, err)
	}
}

func mustIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}
