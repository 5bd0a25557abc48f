package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
)

func TestExitCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("x: %w", inspect.ErrNotFound), exitNotFound},
		{fmt.Errorf("x: %w", inspect.ErrActive), exitRefused},
		{fmt.Errorf("x: %w", errRefused), exitRefused},
		{fmt.Errorf("x: %w", inspect.ErrResizeRunning), exitRefused},
		{fmt.Errorf("x: %w", inspect.ErrInvalidArgument), exitUsage},
		{fmt.Errorf("unknown command %q for %q", "x", "hourglass"), exitUsage},
		{fmt.Errorf("redis down"), exitFailed},
	} {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.want)
		}
	}
}

func TestParseWhen(t *testing.T) {
	t.Parallel()
	now := time.Now()
	ago, err := parseWhen("1h", true)
	if err != nil || ago.After(now.Add(-time.Hour+time.Minute)) || ago.Before(now.Add(-time.Hour-time.Minute)) {
		t.Errorf("1h ago: %v %v", ago, err)
	}
	later, err := parseWhen("10m", false)
	if err != nil || later.Before(now.Add(9*time.Minute)) {
		t.Errorf("in 10m: %v %v", later, err)
	}
	abs, err := parseWhen("2026-01-02T03:04:05Z", true)
	if err != nil || abs.Unix() != 1767323045 {
		t.Errorf("absolute: %v %v", abs, err)
	}
	if _, err := parseWhen("yesterday", true); exitCode(err) != exitUsage {
		t.Errorf("garbage: %v", err)
	}
}

// TestUsageErrorsNeedNoRedis: bad flags and arguments fail before any
// connection, with exit code 2.
func TestUsageErrorsNeedNoRedis(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"-o", "yaml", "queue", "ls"},
		{"queue", "show"},
		{"queue", "nope"},
		{"dlq", "replay", "--at", "soon", "x"},
		{"dlq", "purge"},
		{"task", "ls", "--limit", "many"},
		{"--set", "no_such_key=1", "queue", "ls"},
		{"shards", "nope"},
		{"shards", "resize"},
		{"shards", "resize", "many"},
		{"shards", "resize", "0"},
		{"shards", "resize", "8", "--timeout", "soon"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, strings.NewReader(""), &out, &errOut); code != exitUsage || !strings.HasPrefix(errOut.String(), "hourglass: ") {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

// TestGoFlags: the binaries' one-dash flags work here too; other flags
// and everything after "--" are left alone.
func TestGoFlags(t *testing.T) {
	t.Parallel()
	got := goFlags([]string{"-config", "a.yaml", "-set=x=1", "-version", "-o", "json", "-c", "b", "--set", "y=2", "--", "-config"})
	want := []string{"--config", "a.yaml", "--set=x=1", "--version", "-o", "json", "-c", "b", "--set", "y=2", "--", "-config"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("goFlags:\n got %q\nwant %q", got, want)
	}
}
