package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/tracectx"
	"github.com/hourglass-sched/hourglass/worker"
)

// Environment variables that describe the task to a command.
const (
	EnvTaskID     = "HOURGLASS_TASK_ID"
	EnvQueue      = "HOURGLASS_QUEUE"
	EnvAttempt    = "HOURGLASS_ATTEMPT"
	EnvDueMs      = "HOURGLASS_DUE_MS"
	EnvEnqueuedMs = "HOURGLASS_ENQUEUED_MS"
	// EnvTraceParent carries the W3C traceparent of the handler's span
	// when tracing is on (OpenTelemetry's name for it in a process's
	// environment).
	EnvTraceParent = "TRACEPARENT"
)

const (
	// ExitNoRetry is the exit status (EX_DATAERR) with which a command
	// refuses retries: the task is dead-lettered at once.
	ExitNoRetry = 65
	// stderrTail is how much of the end of stderr goes into the error.
	stderrTail = 512
	// pipeGrace bounds the wait for stderr's end once the command's
	// process group is gone; only a process that left the group can
	// still hold the pipe.
	pipeGrace = time.Second
	// TermGrace is how long a command whose task ends early (its timeout,
	// a cancel, the end of the shutdown grace, a lost lease) has between
	// SIGTERM to its process group and SIGKILL.
	TermGrace = 2 * time.Second
)

// Command returns a handler that runs argv for each task, as described in
// the package documentation. Command copies argv.
func Command(argv []string) worker.Handler {
	argv = slices.Clone(argv)
	return func(ctx context.Context, t *worker.Task) error {
		if len(argv) == 0 || argv[0] == "" {
			return errors.New("command: no program configured")
		}
		return runCommand(ctx, argv, t)
	}
}

// CheckCommand reports whether argv's program can be started: found on
// PATH (a name without "/") or an executable file (a path). The worker
// checks every command target at start, so that a typo fails the start
// instead of every task, retry after retry.
func CheckCommand(argv []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return errors.New("command: no program configured")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return fmt.Errorf("command: program %q cannot be run: %w", argv[0], err)
	}
	return nil
}

// runCommand runs one task. The pipes are made here rather than by
// os/exec so that Wait returns when the program exits, not when the last
// process holding its stderr does: the group is killed first, then the
// pipes are drained.
func runCommand(ctx context.Context, argv []string, t *worker.Task) error {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("command: %w", err)
	}
	stderrR, stderrW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		stdinW.Close()
		return fmt.Errorf("command: %w", err)
	}
	defer stderrR.Close()

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = taskEnv(os.Environ(), t)
	if tp := tracectx.Format(trace.SpanContextFromContext(ctx)); tp != "" {
		cmd.Env = append(cmd.Env, EnvTraceParent+"="+tp) // the handler's span (docs/tracing.md)
	}
	cmd.Stdin = stdinR
	cmd.Stderr = stderrW // stdout stays nil: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Ended early (ctx), the group gets SIGTERM, and SIGKILL TermGrace
	// later if the program is still there (os/exec kills it; the group
	// goes below, after Wait).
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = TermGrace
	err = cmd.Start()
	// The child has its own copies of these ends.
	stdinR.Close()
	stderrW.Close()
	if err != nil {
		stdinW.Close()
		return fmt.Errorf("command: start %s: %w", argv[0], err)
	}

	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		// A program that exits without reading its input makes this
		// fail with EPIPE; that is its business.
		_, _ = stdinW.Write(t.Payload)
		stdinW.Close()
	}()
	var tail tailWriter
	stderrDone := make(chan struct{})
	go func() {
		defer close(stderrDone)
		_, _ = io.Copy(&tail, stderrR)
	}()

	waitErr := cmd.Wait()
	// Whatever the program left running in its group dies with it. The
	// group id is the reaped leader's pid, which Linux does not hand out
	// again while a member of its group still lives.
	_ = killGroup(cmd.Process.Pid)
	stdinW.Close() // unblocks a write to a process that left the group
	<-stdinDone
	select {
	case <-stderrDone:
	case <-time.After(pipeGrace):
		stderrR.Close()
		<-stderrDone
	}
	return commandResult(ctx, waitErr, printable(tail.b))
}

// commandResult maps the end of a command to the handler's result.
func commandResult(ctx context.Context, waitErr error, stderr string) error {
	if waitErr == nil {
		return nil
	}
	suffix := ""
	if stderr != "" {
		suffix = ": " + stderr
	}
	if err := ctx.Err(); err != nil {
		if cause := context.Cause(ctx); cause != nil && cause != err {
			return fmt.Errorf("command killed: %w: %w%s", err, cause, suffix)
		}
		return fmt.Errorf("command killed: %w%s", err, suffix)
	}
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return fmt.Errorf("command: %w", waitErr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Errorf("command killed by signal %s%s", ws.Signal(), suffix)
	}
	err := fmt.Errorf("command exited with status %d%s", ee.ExitCode(), suffix)
	if ee.ExitCode() == ExitNoRetry {
		return worker.NoRetry(err)
	}
	return err
}

// killGroup sends SIGKILL to the process group pgid. It returns
// os.ErrProcessDone if the group has no process left.
func killGroup(pgid int) error { return signalGroup(pgid, syscall.SIGKILL) }

// signalGroup sends sig to the process group pgid, os.ErrProcessDone if
// the group has no process left.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// taskEnv returns environ without the worker's own HOURGLASS_ variables
// (its configuration, possibly with secrets) and trace context
// (TRACEPARENT, TRACESTATE, BAGGAGE), plus the task's variables.
func taskEnv(environ []string, t *worker.Task) []string {
	env := make([]string, 0, len(environ)+5)
	for _, kv := range environ {
		// The worker's own trace context is not the task's: TRACEPARENT
		// is the handler's span's, or none.
		if !strings.HasPrefix(kv, config.EnvPrefix) && !strings.HasPrefix(kv, "TRACEPARENT=") &&
			!strings.HasPrefix(kv, "TRACESTATE=") && !strings.HasPrefix(kv, "BAGGAGE=") {
			env = append(env, kv)
		}
	}
	return append(env,
		EnvTaskID+"="+t.ID,
		EnvQueue+"="+t.Queue,
		EnvAttempt+"="+strconv.Itoa(t.Attempt),
		EnvDueMs+"="+strconv.FormatInt(t.Due.UnixMilli(), 10),
		EnvEnqueuedMs+"="+strconv.FormatInt(t.Enqueued.UnixMilli(), 10),
	)
}

// tailWriter keeps the last stderrTail bytes written to it.
type tailWriter struct{ b []byte }

func (w *tailWriter) Write(p []byte) (int, error) {
	n := len(p)
	if n >= stderrTail {
		w.b = append(w.b[:0], p[n-stderrTail:]...)
		return n, nil
	}
	w.b = append(w.b, p...)
	if over := len(w.b) - stderrTail; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return n, nil
}
