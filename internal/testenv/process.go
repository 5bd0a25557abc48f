// Package testenv starts the real processes that Hourglass tests run
// against: redis-server, etcd and Hourglass's own binaries.
//
// Every process listens on a free loopback port, keeps its data in a
// per-test temporary directory and is stopped by t.Cleanup. The returned
// handles expose the controls that fault tests need: Kill (SIGKILL),
// Terminate (SIGTERM), Pause (SIGSTOP), Resume (SIGCONT) and Restart with
// the same data directory and port.
//
// A missing server binary fails the test with the command that installs
// it; it never skips silently.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// installHint tells a developer how to get the servers the tests need.
const installHint = "install it with: apt-get update && apt-get install -y redis-server etcd-server (or run .ci/run, which does)"

// LookBinary returns the absolute path of a required executable or fails
// the test with an installation hint.
func LookBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("testenv: %q not found in PATH; %s", name, installHint)
	}
	return p
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: find free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Process is a child process under a test's control. Its combined output
// goes to a log file that is printed (tail) if the test fails.
type Process struct {
	t    testing.TB
	name string
	bin  string
	args []string
	env  []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current cmd has exited
	exited error         // result of Wait for the current cmd
}

// StartProcess starts bin with args and env (added to the test's
// environment) and registers its shutdown with t.Cleanup. name labels the
// process in logs.
func StartProcess(t testing.TB, name, bin string, args, env []string) *Process {
	t.Helper()
	p := &Process{
		t:    t,
		name: name,
		bin:  bin,
		args: args,
		env:  env,
		log:  filepath.Join(t.TempDir(), name+".log"),
	}
	if err := p.start(); err != nil {
		t.Fatalf("testenv: start %s: %v", name, err)
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("--- last output of %s (%s) ---\n%s", name, p.log, p.Tail(60))
		}
	})
	return p
}

func (p *Process) start() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout = f
	cmd.Stderr = f
	// Own process group so a signal to the test runner does not reach it
	// twice and so we can signal the whole group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd = cmd
	p.done = done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		f.Close()
		p.mu.Lock()
		p.exited = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Name returns the label given at start.
func (p *Process) Name() string { return p.name }

// LogPath returns the file that receives the process's output.
func (p *Process) LogPath() string { return p.log }

// Pid returns the current process id.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done returns a channel closed when the current incarnation exits.
func (p *Process) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Running reports whether the current incarnation has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	return cmd.Process.Signal(sig)
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Process) Kill() {
	p.t.Helper()
	_ = p.Signal(syscall.SIGCONT) // a paused process must not stay paused
	_ = p.Signal(syscall.SIGKILL)
	p.waitExit(10 * time.Second)
}

// Terminate sends SIGTERM and waits up to timeout for the process to
// exit. It returns the process's exit error (nil for exit status 0).
func (p *Process) Terminate(timeout time.Duration) error {
	p.t.Helper()
	_ = p.Signal(syscall.SIGTERM)
	return p.waitExit(timeout)
}

// Pause stops the process with SIGSTOP.
func (p *Process) Pause() {
	p.t.Helper()
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		p.t.Fatalf("testenv: pause %s: %v", p.name, err)
	}
}

// Resume continues a paused process with SIGCONT.
func (p *Process) Resume() {
	p.t.Helper()
	if err := p.Signal(syscall.SIGCONT); err != nil {
		p.t.Fatalf("testenv: resume %s: %v", p.name, err)
	}
}

// Restart starts the process again with the same arguments (and so the
// same ports and data directory). The previous incarnation must have
// exited.
func (p *Process) Restart() {
	p.t.Helper()
	if p.Running() {
		p.t.Fatalf("testenv: restart %s: still running", p.name)
	}
	if err := p.start(); err != nil {
		p.t.Fatalf("testenv: restart %s: %v", p.name, err)
	}
}

// Wait waits up to timeout for the process to exit by itself and returns
// its exit error.
func (p *Process) Wait(timeout time.Duration) error {
	p.t.Helper()
	return p.waitExit(timeout)
}

func (p *Process) waitExit(timeout time.Duration) error {
	p.t.Helper()
	select {
	case <-p.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.exited
	case <-time.After(timeout):
		p.t.Fatalf("testenv: %s did not exit within %s", p.name, timeout)
		return nil
	}
}

// stop ends the process at cleanup: SIGTERM, then SIGKILL after a grace.
func (p *Process) stop() {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// Tail returns the last n lines of the process's output.
func (p *Process) Tail(n int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// Output returns everything the process printed so far.
func (p *Process) Output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// WaitFor polls cond every few milliseconds until it returns true or the
// deadline passes, in which case the test fails with the last message
// cond returned. It is the only way tests in this module wait: on a
// condition, with a deadline.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errNotReady is returned by readiness probes that have not succeeded yet.
var errNotReady = errors.New("testenv: not ready")

// waitReady polls probe until it succeeds or 20 s pass; the process must
// stay alive meanwhile.
func waitReady(p *Process, probe func() error) error {
	deadline := time.Now().Add(20 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		if !p.Running() {
			return fmt.Errorf("%s exited during start-up:\n%s", p.name, p.Tail(30))
		}
		if err = probe(); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready after 20s: %v\n%s", p.name, err, p.Tail(30))
}
