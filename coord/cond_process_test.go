package coord

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// The helper processes of TestCondAcrossProcesses are this test binary,
// run again with condRoleEnv set (TestMain): a "consumer" takes items
// from the list "items" under the lock, waiting on the condition while
// the list is empty, and prints "got <item>" for each; a "waiter" waits
// once (timeout condTimeoutEnv) and prints "woken" or "timeout".
const (
	condRoleEnv    = "HGTEST_COND_ROLE"
	condAddrEnv    = "HGTEST_COND_ADDR"
	condTimeoutEnv = "HGTEST_COND_TIMEOUT"
	condLiveness   = 300 * time.Millisecond
)

// condHelper runs a helper process's role and returns its exit code.
func condHelper(role string) int {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(condAddrEnv)})
	defer rdb.Close()
	// A helper outlives no test: it ends after two minutes, and with the
	// test process (Pdeathsig, startHelper).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l, err := NewLock(rdb, "jobs", 5*time.Second)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	c, err := NewCond(l, "ready", condLiveness)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	le, err := l.Acquire(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	switch role {
	case "consumer":
		for {
			v, err := rdb.LPop(ctx, "items").Result()
			switch {
			case err == redis.Nil:
				le, _, err = c.Wait(ctx, le, 0)
			case err == nil:
				fmt.Println("got", v)
			}
			if err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
	case "waiter":
		timeout, _ := time.ParseDuration(os.Getenv(condTimeoutEnv))
		le, woken, err := c.Wait(ctx, le, timeout)
		if err == nil {
			err = le.Release(ctx)
		}
		switch {
		case err != nil:
			fmt.Println("error", err)
			return 1
		case woken:
			fmt.Println("woken")
		default:
			fmt.Println("timeout")
		}
		return 0
	}
	fmt.Println("error: unknown role", role)
	return 2
}

// helperProc is a running helper process and the lines it printed.
type helperProc struct {
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	done  chan struct{} // closed when its output ended
}

// startHelper runs this test binary as a helper of role.
func startHelper(t *testing.T, addr, role string, env ...string) *helperProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = testenv.Environ(append(env, condRoleEnv+"="+role, condAddrEnv+"="+addr)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &helperProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		_ = cmd.Wait()
	})
	return p
}

// printed returns the lines p printed so far that start with prefix.
func (p *helperProc) printed(prefix string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// Real processes: consumers in two processes and a producer in this one,
// the oldest consumer killed (SIGKILL) while it waits: every item is
// taken exactly once by the live consumers, the first after the dead
// one's liveness lapsed. And a Broadcast wakes exactly the three waiter
// processes that wait when it runs, not one that comes after it.
func TestCondAcrossProcesses(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	rdb := r.Client(t)
	ctx := testenv.Ctx(t, 2*time.Minute)
	l, c := newCond(t, rdb, condLiveness)
	addr := rdb.Options().Addr

	// Producer and consumers.
	victim := startHelper(t, addr, "consumer")
	waitWaiters(t, ctx, c, 1)
	live := startHelper(t, addr, "consumer")
	waitWaiters(t, ctx, c, 2)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.done
	produce := func(items ...string) {
		t.Helper()
		le, err := l.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			rdb.RPush(ctx, "items", it)
			if _, err := c.Signal(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := le.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	produce("first") // its Signal goes to the dead consumer, the oldest
	testenv.WaitFor(t, 20*time.Second, "the live consumer takes the first item", func() (bool, string) {
		return len(live.printed("got first")) == 1, strings.Join(live.printed(""), "; ")
	})
	t.Logf("the first item, signalled to the killed consumer, was taken by the live one after %v (liveness %v)", time.Since(start).Round(time.Millisecond), condLiveness)
	third := startHelper(t, addr, "consumer")
	waitWaiters(t, ctx, c, 2)
	var want []string
	for i := range 40 {
		want = append(want, fmt.Sprintf("item-%d", i))
	}
	for i := 0; i < len(want); i += 4 {
		produce(want[i : i+4]...)
	}
	testenv.WaitFor(t, 20*time.Second, "every item taken", func() (bool, string) {
		n := len(live.printed("got item-")) + len(third.printed("got item-"))
		return n >= len(want), fmt.Sprint(n)
	})
	taken := map[string]int{}
	for _, l := range append(live.printed("got item-"), third.printed("got item-")...) {
		taken[strings.TrimPrefix(l, "got ")]++
	}
	for _, it := range want {
		if taken[it] != 1 {
			t.Errorf("%s taken %d times", it, taken[it])
		}
	}
	if errs := append(live.printed("error"), third.printed("error")...); len(errs) > 0 {
		t.Errorf("consumers failed: %v", errs)
	}
	t.Logf("40 items: %d taken by one consumer process, %d by the other", len(live.printed("got item-")), len(third.printed("got item-")))
	_ = live.cmd.Process.Kill()
	_ = third.cmd.Process.Kill()
	<-live.done
	<-third.done

	// Broadcast: exactly the waiters present.
	testenv.WaitFor(t, 10*time.Second, "the killed consumers' waits dropped", func() (bool, string) {
		// A Broadcast drops the dead waiters once their liveness lapsed
		// (a Signal would leave a wake-up to pass on to the next waiter,
		// one of those started below); none is live.
		n, err := c.Broadcast(ctx)
		left, _ := c.Waiters(ctx)
		return err == nil && n == 0 && left == 0, fmt.Sprint(n, left, err)
	})
	// Wake-ups the killed consumers did not take (a Signal's would pass
	// to a waiter started below) are dropped by the first call after
	// their liveness, there being no live waiter: wait for that.
	testenv.WaitFor(t, 10*time.Second, "no wake-up left to take", func() (bool, string) {
		_, err := c.Broadcast(ctx)
		n := rdb.HLen(ctx, c.keys[2]).Val()
		return err == nil && n == 0, fmt.Sprint(n, err)
	})
	var waiters []*helperProc
	for i := range 3 {
		waiters = append(waiters, startHelper(t, addr, "waiter", condTimeoutEnv+"=30s"))
		waitWaiters(t, ctx, c, int64(i+1))
	}
	if n, err := c.Broadcast(ctx); n != 3 || err != nil {
		t.Fatalf("Broadcast = %d, %v; want 3", n, err)
	}
	late := startHelper(t, addr, "waiter", condTimeoutEnv+"=1s")
	for i, p := range append(waiters, late) {
		<-p.done
		want := "woken"
		if p == late {
			want = "timeout"
		}
		if got := p.printed(""); len(got) != 1 || got[0] != want {
			t.Errorf("waiter %d printed %q, want %q", i+1, got, want)
		}
	}
}
