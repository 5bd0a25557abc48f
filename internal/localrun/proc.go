// Package localrun starts and controls local processes: redis-server,
// etcd and Hourglass's own binaries, each on free loopback ports with its
// data in a directory of the caller's. The test harness (internal/testenv)
// and the local demo cluster (cmd/hourglass-demo) are both built on it.
package localrun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrMissingBinary reports a server binary that is not installed.
var ErrMissingBinary = errors.New("localrun: binary not found in PATH; install it with: apt-get update && apt-get install -y redis-server etcd-server (or run scripts/install-deps.sh)")

// Look returns the absolute path of an executable or ErrMissingBinary.
func Look(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s", ErrMissingBinary, name)
	}
	return p, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no process using this package has handed out while it runs.
//
// The port comes from below the kernel's ephemeral range when there is room
// (20000 up to ip_local_port_range's low end): the kernel never picks those
// for outgoing connections or for another program's bind to port 0, so the
// port is still free when the child process binds it a moment later. Two
// calls never return the same port, even when the first caller has not
// bound its port yet: handing out a port the kernel had just given back
// was how two worker binaries of one test once got the same HTTP address.
// And two processes never hand out the same port: each draws from blocks
// of the range it holds a file lock on for as long as it runs (the test
// binaries of one go test run side by side), so a server a test kills and
// restarts on its port finds it free: another test binary had taken a
// port freed by a killed Redis before its restart.
func FreePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.given == nil {
		ports.given = make(map[int]bool)
	}
	lo, hi := 20000, ephemeralLow()
	if hi-lo < 1000 {
		return pickPort(0, 0) // let the kernel choose
	}
	for {
		if ports.block < 0 || ports.tries >= portBlock {
			b, err := reserveBlock(lo, hi)
			if err != nil {
				return pickPort(lo, hi) // no block free: the whole range, as one process
			}
			ports.block, ports.tries = b, 0
		}
		from := lo + ports.block*portBlock
		if p, err := pickPort(from, from+portBlock); err == nil {
			return p, nil
		}
		ports.tries = portBlock // this block is used up: take another
	}
}

// portBlock is how many ports of FreePort's range one process holds at a
// time.
const portBlock = 500

// pickPort returns a port of [lo, hi) that is free and not handed out yet
// (any port the kernel gives when hi is 0). ports.mu is held.
func pickPort(lo, hi int) (int, error) {
	for try := 0; try < 200; try++ {
		ports.tries++
		p := 0
		if hi > 0 {
			p = lo + rand.IntN(hi-lo)
		}
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			if p == 0 {
				return 0, fmt.Errorf("localrun: find free port: %w", err)
			}
			continue // in use: try another
		}
		p = l.Addr().(*net.TCPAddr).Port
		l.Close()
		if ports.given[p] {
			continue
		}
		ports.given[p] = true
		return p, nil
	}
	return 0, errors.New("localrun: find free port: no free port after 200 tries")
}

// reserveBlock locks a block of [lo, hi) that no other running process
// holds, for the rest of this process's life (the kernel drops the lock
// when it exits), and returns its number. ports.mu is held.
func reserveBlock(lo, hi int) (int, error) {
	dir := filepath.Join(os.TempDir(), "hourglass-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, err
	}
	n := (hi - lo) / portBlock
	for _, b := range rand.Perm(n) {
		if slices.Contains(ports.held, b) {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d-%d.lock", lo, b)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		ports.held = append(ports.held, b)
		ports.locks = append(ports.locks, f) // kept open: the lock lasts while the process runs
		return b, nil
	}
	return 0, errors.New("localrun: every port block is held by another process")
}

// ports records every port FreePort handed out and the blocks this
// process holds.
var ports = struct {
	mu    sync.Mutex
	given map[int]bool
	block int // the block drawn from; -1: none yet
	tries int // ports tried in it
	held  []int
	locks []*os.File
}{block: -1}

// ephemeralLow returns the low end of the kernel's ephemeral port range, or
// 0 when it cannot be read (then FreePort lets the kernel choose).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}

// Proc is a child process. Its combined output goes to a log file. It
// runs in its own process group so that Ctrl-C in a terminal reaches only
// the parent, which stops its children in order.
type Proc struct {
	name string
	bin  string
	args []string
	env  []string
	log  string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	exited error
}

// Start starts bin with args and env (added to this process's
// environment), its output appended to logPath.
func Start(name, bin string, args, env []string, logPath string) (*Proc, error) {
	p := &Proc{name: name, bin: bin, args: args, env: env, log: logPath}
	if err := p.start(p.args); err != nil {
		return nil, fmt.Errorf("localrun: start %s: %w", name, err)
	}
	return p, nil
}

func (p *Proc) start(args []string) error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.exited = cmd, done, nil
	p.mu.Unlock()
	go func() { // owned by the process: ends when it exits
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
func (p *Proc) Name() string { return p.name }

// LogPath returns the file that receives the process's output.
func (p *Proc) LogPath() string { return p.log }

// Pid returns the current incarnation's process id.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Done returns a channel closed when the current incarnation exits.
func (p *Proc) Done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Running reports whether the current incarnation has not exited.
func (p *Proc) Running() bool {
	select {
	case <-p.Done():
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	return cmd.Process.Signal(sig)
}

// Wait waits for the current incarnation to exit, at most until ctx ends,
// and returns its exit error (nil for status 0).
func (p *Proc) Wait(ctx context.Context) error {
	select {
	case <-p.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.exited
	case <-ctx.Done():
		return fmt.Errorf("localrun: %s still running: %w", p.name, ctx.Err())
	}
}

// Restart starts a new incarnation with the same arguments (same ports,
// same data directory). The previous one must have exited.
func (p *Proc) Restart() error { return p.RestartWith() }

// RestartWith is Restart with extra arguments after the original ones,
// for this incarnation only: a later Restart uses the original ones.
func (p *Proc) RestartWith(extra ...string) error {
	if p.Running() {
		return fmt.Errorf("localrun: restart %s: still running", p.name)
	}
	return p.start(append(slices.Clip(p.args), extra...))
}

// Stop ends the process: SIGCONT (in case it is paused), SIGTERM, and
// SIGKILL if it has not exited after grace. It waits until it is gone.
func (p *Proc) Stop(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.Done():
		return
	case <-time.After(grace):
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// Kill sends SIGKILL and waits until the process is gone.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGCONT)
	_ = p.Signal(syscall.SIGKILL)
	<-p.Done()
}

// Tail returns the last n lines of the process's output.
func (p *Proc) Tail(n int) string {
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

// WaitReady polls probe until it succeeds, the process exits, or timeout
// passes.
func (p *Proc) WaitReady(timeout time.Duration, probe func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if !p.Running() {
			return fmt.Errorf("localrun: %s exited during start-up:\n%s", p.name, p.Tail(30))
		}
		if err = probe(); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("localrun: %s not ready after %s: %v\n%s", p.name, timeout, err, p.Tail(30))
}
