package localrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestLookReportsHowToInstall(t *testing.T) {
	t.Parallel()
	_, err := Look("no-such-binary-hourglass")
	if !errors.Is(err, ErrMissingBinary) || !strings.Contains(err.Error(), "apt-get install") {
		t.Fatalf("Look = %v, want ErrMissingBinary with an install hint", err)
	}
}

func TestProcLifecycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p, err := Start("sleeper", "/bin/sh", []string{"-c", "echo started; exec sleep 60"}, nil, filepath.Join(dir, "s.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	if err := p.WaitReady(5*time.Second, func() error {
		if !strings.Contains(p.Tail(1), "started") {
			return errors.New("no output yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Restart(); err == nil {
		t.Fatal("Restart of a running process succeeded")
	}
	_ = p.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Wait(ctx); err == nil || p.Running() {
		t.Fatalf("after SIGTERM: err %v running %v", err, p.Running())
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.Running() {
		t.Fatal("running after Kill")
	}
}

// TestFreePortNeverRepeats: ports handed out are distinct even when none
// of them is bound (the callers' children bind them later), and they stay
// out of the kernel's ephemeral range, which outgoing connections draw on.
func TestFreePortNeverRepeats(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	seen := make(map[int]bool)
	for i := 0; i < 2000; i++ {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice (call %d)", p, i)
		}
		seen[p] = true
		if low-20000 >= 1000 && (p < 20000 || p >= low) {
			t.Fatalf("port %d outside [20000, %d)", p, low)
		}
	}
}

// TestFreePortBlocksAreNotShared: a port block this process holds cannot
// be locked by another process (here, another open file description, as
// another process's would be), so two test binaries never hand out the
// same port, and one a test binary restarts a server on stays its own.
func TestFreePortBlocksAreNotShared(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	if low-20000 < 1000 {
		t.Skip("no room below the ephemeral range: FreePort lets the kernel choose")
	}
	p, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	b := (p - 20000) / portBlock
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "hourglass-ports", fmt.Sprintf("%d-%d.lock", 20000, b)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatalf("port %d's block %d could be locked again: another process could hand out its ports", p, b)
	}
}
