package localrun

import (
	"context"
	"errors"
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
