package executor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/executor"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// sh returns the handler for a /bin/sh script.
func sh(script string) func(context.Context, string) error {
	h := executor.Command([]string{"/bin/sh", "-c", script})
	return func(ctx context.Context, payload string) error { return h(ctx, task(payload)) }
}

func TestCommandSuccessReadsStdinAndEnv(t *testing.T) {
	t.Setenv("HOURGLASS_REDIS__PASSWORD", "s3cret") // the worker's own config
	t.Setenv("EXECUTOR_TEST_KEPT", "yes")
	script := `test "$(cat)" = hello &&
		test "$HOURGLASS_TASK_ID" = order-42 &&
		test "$HOURGLASS_QUEUE" = webhooks &&
		test "$HOURGLASS_ATTEMPT" = 3 &&
		test "$HOURGLASS_DUE_MS" = 1767319445678 &&
		test "$HOURGLASS_ENQUEUED_MS" = 1767316000123 &&
		test -z "$HOURGLASS_REDIS__PASSWORD" &&
		test "$EXECUTOR_TEST_KEPT" = yes &&
		echo "to stdout, discarded"`
	if err := sh(script)(context.Background(), "hello"); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if err := sh(`test "$(cat)" = hello`)(context.Background(), "other"); err == nil {
		t.Fatal("the script should have seen a different payload")
	}
}

func TestCommandResults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string
		want    []string // nil means success
		notWant []string
	}{
		{"exit 0", "exit 0", nil, nil},
		{"failure with stderr", "echo first >&2; echo 'it broke' >&2; exit 3",
			[]string{"command exited with status 3: first\nit broke"}, []string{"not retryable"}},
		{"failure without stderr", "exit 1", []string{"command exited with status 1"}, []string{": "}},
		{"EX_TEMPFAIL is retryable", "exit 75", []string{"command exited with status 75"}, []string{"not retryable"}},
		{"EX_DATAERR is not retryable", "echo 'bad payload' >&2; exit 65",
			[]string{"not retryable: command exited with status 65: bad payload"}, nil},
		{"signal", "kill -TERM $$", []string{"command killed by signal terminated"}, nil},
		{"stderr tail", `i=0; while [ $i -lt 100 ]; do echo "line $i ................" >&2; i=$((i+1)); done; echo END >&2; exit 2`,
			[]string{"command exited with status 2: ", "END"}, []string{"line 1 ", "line 50 "}},
		{"unread large payload", "exit 0", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := "p"
			if tt.name == "unread large payload" {
				payload = strings.Repeat("x", 4<<20)
			}
			err := sh(tt.script)(context.Background(), payload)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want an error containing %q", tt.want)
			}
			msg := err.Error()
			for _, f := range tt.want {
				if !strings.Contains(msg, f) {
					t.Errorf("error %q does not contain %q", msg, f)
				}
			}
			for _, f := range tt.notWant {
				if strings.Contains(msg, f) {
					t.Errorf("error %q contains %q", msg, f)
				}
			}
			if tt.name == "stderr tail" {
				_, tail, _ := strings.Cut(msg, "status 2: ")
				if len(tail) > 512 {
					t.Errorf("stderr tail is %d bytes, want at most 512", len(tail))
				}
			}
		})
	}
}

func TestCommandStartError(t *testing.T) {
	t.Parallel()
	err := executor.Command([]string{filepath.Join(t.TempDir(), "missing")})(context.Background(), task("p"))
	if err == nil || !strings.Contains(err.Error(), "command: start") {
		t.Fatalf("got %v, want a start error", err)
	}
	if err := executor.Command(nil)(context.Background(), task("p")); err == nil {
		t.Fatal("empty argv: got nil")
	}
}

// alive reports whether pid is a process that is neither gone nor a
// zombie (a killed orphan may wait for its reaper a little).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// readPid waits for the script to write its child's pid to path.
func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	testenv.WaitFor(t, 5*time.Second, "the child's pid in "+path, func() (bool, string) {
		b, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false, fmt.Sprint(err)
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil, fmt.Sprint(err)
	})
	return pid
}

func TestCommandTimeoutKillsProcessGroup(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The child ignores SIGTERM and holds stderr; only killing the group
	// ends it.
	h := sh(`trap '' TERM; sleep 60 & echo $! > ` + pidFile + `; wait`)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := h(ctx, "p")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "command killed") {
		t.Fatalf("got %v, want a kill error wrapping context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > executor.TermGrace+3*time.Second {
		t.Errorf("returned %s after the start, want soon after the 300ms timeout and the %s SIGTERM grace", d, executor.TermGrace)
	}
	pid := readPid(t, pidFile)
	testenv.WaitFor(t, 5*time.Second, "the sleep child to be gone", func() (bool, string) {
		return !alive(pid), fmt.Sprintf("pid %d still alive", pid)
	})
}

// TestCommandGetsSIGTERMFirst (#27): a command whose task ends early (a
// cancel, here) gets SIGTERM, and may finish its work: its handler
// writes a file and exits.
func TestCommandGetsSIGTERMFirst(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "terminated")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("task cancelled")) })
	err := sh(`trap 'echo bye > `+marker+`; exit 0' TERM; sleep 60 & wait`)(ctx, "p")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want an error wrapping context.Canceled", err)
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "bye\n" {
		t.Fatalf("the command's TERM handler did not run: %q, %v", b, err)
	}
}

func TestCommandCancelCause(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("lease lost")
	time.AfterFunc(100*time.Millisecond, func() { cancel(cause) })
	err := sh("sleep 60")(ctx, "p")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Fatalf("got %v, want an error wrapping context.Canceled and the cause", err)
	}
}

func TestCommandLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	pidFile := filepath.Join(t.TempDir(), "pid")
	// The program exits at once but leaves a child holding stdin and
	// stderr open.
	start := time.Now()
	if err := sh(`sleep 60 & echo $! > `+pidFile)(context.Background(), "p"); err != nil {
		t.Fatalf("got %v, want nil", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("returned after %s: waited for the leftover child", d)
	}
	pid := readPid(t, pidFile)
	testenv.WaitFor(t, 5*time.Second, "the leftover child to be gone", func() (bool, string) {
		return !alive(pid), fmt.Sprintf("pid %d still alive", pid)
	})
}
