// Package testenv starts the real processes that Hourglass tests run
// against: redis-server, etcd and Hourglass's own binaries. It wraps
// internal/localrun with the testing package: every process listens on
// free loopback ports, keeps its data in the test's temporary directory,
// and is stopped by t.Cleanup; a failure to start fails the test.
//
// The handles expose the controls that fault tests need: Kill (SIGKILL),
// Terminate (SIGTERM), Pause (SIGSTOP), Resume (SIGCONT) and Restart with
// the same data directory and ports.
//
// A missing server binary fails the test with the command that installs
// it; it never skips silently.
//
// It also holds what tests of every package share and that needs nothing
// of Hourglass's own packages: placement computed as producers compute it
// (ShardOf, IDs, MovingIDs) and a go-redis hook that makes something
// happen right after a given command (AfterCommand).
package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// LookBinary returns the absolute path of a required executable or fails
// the test with an installation hint.
func LookBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := localrun.Look(name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return p
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := localrun.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Process is a child process under a test's control. Its output goes to
// a log file whose tail is printed if the test fails.
type Process struct {
	*localrun.Proc
	t testing.TB
}

// StartProcess starts bin with args and env (added to the test's
// environment, with GORACE as Environ sets it) and registers its shutdown
// with t.Cleanup. name labels the process in logs.
func StartProcess(t testing.TB, name, bin string, args, env []string) *Process {
	t.Helper()
	env = append(slices.Clone(env), raceExit(env))
	p, err := localrun.Start(name, bin, args, env, filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return watch(t, p)
}

// watch registers p's shutdown and log dump with t.Cleanup.
func watch(t testing.TB, p *localrun.Proc) *Process {
	t.Cleanup(func() {
		p.Stop(5 * time.Second)
		if t.Failed() {
			t.Logf("--- last output of %s (%s) ---\n%s", p.Name(), p.LogPath(), p.Tail(60))
		}
	})
	return &Process{Proc: p, t: t}
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() { p.Proc.Kill() }

// Terminate sends SIGTERM and waits up to timeout for the process to
// exit. It returns the exit error (nil for status 0).
func (p *Process) Terminate(timeout time.Duration) error {
	p.t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	return p.Wait(timeout)
}

// Pause stops the process with SIGSTOP.
func (p *Process) Pause() {
	p.t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("testenv: pause %s: %v", p.Name(), err)
	}
}

// Stopped reports whether the process is stopped (by SIGSTOP, its own
// or another's), from its state in /proc.
func (p *Process) Stopped() bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() {
	p.t.Helper()
	if err := p.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("testenv: resume %s: %v", p.Name(), err)
	}
}

// Restart starts the process again with the same arguments; the previous
// incarnation must have exited.
func (p *Process) Restart() {
	p.t.Helper()
	if err := p.Proc.Restart(); err != nil {
		p.t.Fatal(err)
	}
}

// Wait waits up to timeout for the process to exit and returns its exit
// error; it fails the test if the process is still running then.
func (p *Process) Wait(timeout time.Duration) error {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := p.Proc.Wait(ctx)
	if ctx.Err() != nil && p.Running() {
		p.t.Fatalf("testenv: %s did not exit within %s", p.Name(), timeout)
	}
	return err
}

// WaitFor polls cond until it returns true or the deadline passes, in
// which case the test fails with the last message cond returned. Tests in
// this module wait this way: on a condition, with a deadline.
//
// It polls every 5 ms at first, then less often, down to every
// waitPollMax: a condition that holds soon is seen at once, and one that
// takes seconds (a lease to run out, thousands of deliveries) is not
// evaluated hundreds of times a second, each time costing the test, Redis
// and etcd CPU that the busy machine of make test has little of.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, waitPollMax) {
		ok, msg := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, msg)
		}
		time.Sleep(wait)
	}
}

// waitPollMax is the longest WaitFor sleeps between two looks: the most
// it adds to a wait.
const waitPollMax = 50 * time.Millisecond

// Ctx returns a context that ends after d and is cancelled at cleanup.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Environ returns the test's environment with extra added, for a child
// process built by BuildBinary: GORACE gains atexit_sleep_ms=0 unless it
// sets that already. A race-enabled binary otherwise sleeps a second
// before it exits (the race runtime's default, to let other goroutines
// report), which every CLI run and every stop of a process in the tests
// would wait for; StartProcess adds it too.
func Environ(extra ...string) []string {
	return append(append(os.Environ(), extra...), raceExit(extra))
}

// raceExit returns the GORACE entry for a child whose environment is the
// test's with env added.
func raceExit(env []string) string {
	opts := os.Getenv("GORACE")
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			opts = v
		}
	}
	if !strings.Contains(opts, "atexit_sleep_ms") {
		opts = strings.TrimSpace(opts + " atexit_sleep_ms=0")
	}
	return "GORACE=" + opts
}
