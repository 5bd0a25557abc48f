package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// records returns the JSON records written to logs so far whose message
// contains msg.
func records(t *testing.T, logs *testenv.Buffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		if m, _ := r["msg"].(string); strings.Contains(m, msg) {
			out = append(out, r)
		}
	}
	return out
}

// panickingHandler panics on every attempt; its name is what the logged
// stack must show.
func panickingHandler(_ context.Context, task *Task) error {
	panic(fmt.Sprintf("boom on attempt %d", task.Attempt))
}

// TestHandlerPanicLoggedWithStack: a handler's panic is logged, through
// Config.Slog, at error level with the task's id, the panic value and a
// stack that names the handler's frame; the attempt still fails as an
// error does: retried, then dead-lettered with the panic as its error.
func TestHandlerPanicLoggedWithStack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shard.QueuePolicy{MaxRetries: 1, Timeout: 30 * time.Second,
		Backoff: shard.Backoff{Base: 10 * time.Millisecond, Cap: 10 * time.Millisecond, Factor: 1}})
	var logs testenv.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	e.start(e.RDB, QueueOptions{}, panickingHandler, func(c *Config) { c.Slog = log })
	e.enqueue("panics", 0)
	testenv.WaitFor(t, 30*time.Second, "the panicking task dead-lettered", func() (bool, string) {
		info, err := e.Lookup("panics")
		return err == nil && info.State == "dead", fmt.Sprintf("%s %v", info.State, err)
	})
	info, _ := e.Lookup("panics")
	if info.Task.Attempts != 2 || !strings.Contains(info.DeadInfo, "handler panic: boom on attempt 2") {
		t.Errorf("dead task: attempts %d, info %s; want 2 attempts and the panic as its error", info.Task.Attempts, info.DeadInfo)
	}
	recs := records(t, &logs, "handler panicked")
	if len(recs) != 2 {
		t.Fatalf("%d panic records, want one per attempt: %v", len(recs), recs)
	}
	for i, r := range recs {
		stack, _ := r["stack"].(string)
		switch {
		case r["level"] != "ERROR" || r["task"] != "panics" || r["queue"] != "q" || r["logger"] != "worker":
			t.Errorf("record %v: want level ERROR, task panics, queue q, logger worker", r)
		case r["panic"] != fmt.Sprintf("boom on attempt %d", i+1):
			t.Errorf("record's panic %q, want the panic value of attempt %d", r["panic"], i+1)
		case !strings.Contains(stack, "worker.panickingHandler(") || !strings.Contains(stack, "logging_test.go:"):
			t.Errorf("record's stack does not name the handler's frame:\n%s", stack)
		}
	}
}

// TestLoggerOrSlog: Config takes an hclog Logger or a slog logger, not
// both.
func TestLoggerOrSlog(t *testing.T) {
	t.Parallel()
	err := Config{Slog: slog.Default(), Logger: hclog.NewNullLogger()}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Slog") {
		t.Errorf("both loggers: %v, want an invalid config naming Slog", err)
	}
	for _, c := range []Config{{Slog: slog.Default()}, {Logger: hclog.NewNullLogger()}, {}} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
