package executor

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/hourglass-sched/hourglass/internal/config"
	"github.com/hourglass-sched/hourglass/internal/tracectx"
	"github.com/hourglass-sched/hourglass/worker"
)

// Request headers that describe the task.
const (
	HeaderTaskID     = "Hourglass-Task-Id"
	HeaderQueue      = "Hourglass-Queue"
	HeaderAttempt    = "Hourglass-Attempt"
	HeaderDue        = "Hourglass-Due"
	HeaderDueMs      = "Hourglass-Due-Ms"
	HeaderEnqueuedMs = "Hourglass-Enqueued-Ms"
)

const (
	// bodyExcerpt is how much of an error answer's body goes into the
	// error.
	bodyExcerpt = 256
	// drainLimit is how much of an answer's body is read so that the
	// connection can be reused; a longer body closes the connection.
	drainLimit = 64 << 10
	// dueLayout is RFC 3339 with milliseconds, in UTC.
	dueLayout = "2006-01-02T15:04:05.000Z07:00"
)

// HTTP returns a handler that delivers each task to target: one request
// with the payload as the body, answered as described in the package
// documentation. client sends the requests (nil: http.DefaultClient, no
// timeout of its own); the request ends with the handler's ctx, which
// carries the queue's handler timeout. HTTP copies target.
func HTTP(target config.HTTPTarget, client *http.Client) worker.Handler {
	if client == nil {
		client = http.DefaultClient
	}
	method := target.Method
	if method == "" {
		method = http.MethodPost
	}
	url := target.URL
	// Canonical names, so that a configured header replaces a default
	// one (Content-Type) and cannot replace a task header.
	configured := make(http.Header, len(target.Headers))
	for name, value := range target.Headers {
		configured.Set(name, value)
	}
	return func(ctx context.Context, t *worker.Task) error {
		req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(t.Payload))
		if err != nil {
			// A configuration error (validated at start): retrying keeps
			// the task until the configuration is fixed.
			return fmt.Errorf("http: build request: %w", err)
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		for name, values := range configured {
			if name == "Host" {
				req.Host = values[0]
				continue
			}
			req.Header[name] = values
		}
		setTaskHeaders(req.Header, t)
		if tp := tracectx.Format(trace.SpanContextFromContext(ctx)); tp != "" {
			req.Header.Set("Traceparent", tp) // the handler's span (docs/tracing.md)
		}

		resp, err := client.Do(req)
		if err != nil {
			// The client's error names the method and the URL without
			// its password; it wraps ctx's error when ctx ended.
			return fmt.Errorf("http: %w", err)
		}
		defer func() {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
			resp.Body.Close()
		}()
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			// The body is the task's result when the queue keeps records
			// and the body fits (worker.MaxResult); otherwise it is only
			// drained.
			if t.KeepsResult() {
				body, err := io.ReadAll(io.LimitReader(resp.Body, worker.MaxResult+1))
				if err == nil && len(body) > 0 && len(body) <= worker.MaxResult {
					_ = t.SetResult(body)
				}
			}
			return nil
		}
		excerpt, _ := io.ReadAll(io.LimitReader(resp.Body, bodyExcerpt))
		herr := fmt.Errorf("http %d: %s", resp.StatusCode, printable(excerpt))
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return worker.RetryAfter(d, herr)
		}
		return herr
	}
}

func setTaskHeaders(h http.Header, t *worker.Task) {
	h.Set(HeaderTaskID, t.ID)
	h.Set(HeaderQueue, t.Queue)
	h.Set(HeaderAttempt, strconv.Itoa(t.Attempt))
	h.Set(HeaderDue, t.Due.UTC().Format(dueLayout))
	h.Set(HeaderDueMs, strconv.FormatInt(t.Due.UnixMilli(), 10))
	h.Set(HeaderEnqueuedMs, strconv.FormatInt(t.Enqueued.UnixMilli(), 10))
}

// retryAfter parses a Retry-After value (RFC 9110, section 10.2.3):
// delta-seconds or an HTTP date, which counts from now and is 0 if past.
// ok is false for an empty or invalid value.
func retryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			if ne, isNum := err.(*strconv.NumError); !isNum || ne.Err != strconv.ErrRange {
				return 0, false
			}
			n = math.MaxUint64 // too large: as long as a Duration goes
		}
		if n > uint64(math.MaxInt64/int64(time.Second)) {
			return time.Duration(math.MaxInt64), true
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// printable turns a piece of output (a body excerpt, a stderr tail) into
// error text: valid UTF-8, no surrounding white space.
func printable(b []byte) string {
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}
