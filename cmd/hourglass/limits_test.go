package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// queue limit sets a queue's limits at run time (the workers read them
// from the paused hash), queue show and the JSON listing show them,
// --clear drops them; bad flags exit 2, an unknown queue 3.
func TestQueueLimit(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "lim")
	ctx := testenv.Ctx(t, 30*time.Second)
	out, errOut, code := e.cli("queue", "limit", "q", "--rate", "50", "--burst", "10", "--max-concurrency", "5")
	if code != exitOK || !strings.Contains(out, "limited q: at most 5 running; 50 per 1s by token_bucket, burst 10") {
		t.Fatalf("queue limit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	c, err := e.store.Controls(ctx)
	if l := c.Limits["q"]; err != nil || l.Rate != 50 || l.Burst != 10 || l.MaxConcurrency != 5 {
		t.Fatalf("stored limits %+v, %v", c.Limits, err)
	}
	if out, _, code := e.cli("queue", "show", "q"); code != exitOK || !strings.Contains(out, "limits") || !strings.Contains(out, "(set at run time)") {
		t.Errorf("queue show: exit %d\n%s", code, out)
	}
	out, _, code = e.cli("-o", "json", "queue", "ls")
	var ls struct {
		Queues []struct {
			Name   string         `json:"name"`
			Limits map[string]any `json:"limits"`
		} `json:"queues"`
	}
	if err := json.Unmarshal([]byte(out), &ls); code != exitOK || err != nil || len(ls.Queues) != 1 || ls.Queues[0].Limits["rate"] != 50.0 {
		t.Errorf("queue ls -o json: exit %d, %v\n%s", code, err, out)
	}
	for _, bad := range [][]string{
		{"queue", "limit", "q"},
		{"queue", "limit", "q", "--rate", "5", "--clear"},
		{"queue", "limit", "q", "--rate", "5", "--kind", "gcra"},
		{"queue", "limit", "q", "--rate", "5", "--burst", "3", "--kind", "sliding_window"},
		{"queue", "limit", "q", "--max-concurrency", "0"},
		{"queue", "limit", "q", "--max-concurrency", "3", "--burst", "5"},
	} {
		if _, errOut, code := e.cli(bad...); code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", bad, code, errOut, exitUsage)
		}
	}
	if _, _, code := e.cli("queue", "limit", "nosuch", "--rate", "5"); code != exitNotFound {
		t.Errorf("limit of an unknown queue: exit %d, want %d", code, exitNotFound)
	}
	if out, errOut, code := e.cli("queue", "limit", "q", "--clear"); code != exitOK || !strings.Contains(out, "cleared the limits of q") {
		t.Fatalf("--clear: exit %d, %q, %q", code, out, errOut)
	}
	if c, err := e.store.Controls(ctx); err != nil || len(c.Limits) != 0 {
		t.Fatalf("limits after --clear: %+v, %v", c.Limits, err)
	}
}

// queue weight sets a key's weight in every shard; a bad weight exits 2,
// an unknown queue 3.
func TestQueueWeight(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "wt")
	ctx := testenv.Ctx(t, 30*time.Second)
	if out, errOut, code := e.cli("queue", "weight", "q", "tenant-42", "5"); code != exitOK || !strings.Contains(out, `weighted key "tenant-42" of q: 5 turns per round`) {
		t.Fatalf("queue weight: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if w, err := e.store.KeyWeights(ctx, "q"); err != nil || w["tenant-42"] != 5 {
		t.Fatalf("stored weights %v, %v", w, err)
	}
	for _, bad := range [][]string{
		{"queue", "weight", "q", "tenant-42"},
		{"queue", "weight", "q", "tenant-42", "-1"},
		{"queue", "weight", "q", "tenant-42", "1001"},
		{"queue", "weight", "q", "tenant-42", "x"},
	} {
		if _, errOut, code := e.cli(bad...); code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", bad, code, errOut, exitUsage)
		}
	}
	if _, _, code := e.cli("queue", "weight", "q", "a}b", "2"); code != exitUsage {
		t.Errorf("a key with a brace: exit %d, want %d", code, exitUsage)
	}
	if _, _, code := e.cli("queue", "weight", "nosuch", "k", "2"); code != exitNotFound {
		t.Errorf("weight in an unknown queue: exit %d, want %d", code, exitNotFound)
	}
	if out, _, code := e.cli("queue", "weight", "q", "tenant-42", "0"); code != exitOK || !strings.Contains(out, `paused key "tenant-42" of q`) {
		t.Fatalf("weight 0: exit %d, %q", code, out)
	}
	if out, _, code := e.cli("-o", "json", "queue", "weight", "q", "tenant-42", "0"); code != exitOK || !strings.Contains(out, `"weight": 0`) {
		t.Fatalf("weight 0 in JSON: exit %d, %q", code, out)
	}
	if _, _, code := e.cli("queue", "weight", "q", "tenant-42", "1"); code != exitOK {
		t.Fatalf("weight 1: exit %d", code)
	}
	if w, err := e.store.KeyWeights(ctx, "q"); err != nil || len(w) != 0 {
		t.Fatalf("weights after weight 1: %v, %v", w, err)
	}
}

// TestQueueKeycap: queue keycap sets a key's own concurrency cap (0: no
// cap), "default" drops it, bad caps are usage errors and an unknown
// queue is not found.
func TestQueueKeycap(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "kc")
	ctx := testenv.Ctx(t, 30*time.Second)
	if out, errOut, code := e.cli("queue", "keycap", "q", "tenant-42", "3"); code != exitOK || !strings.Contains(out, `capped key "tenant-42" of q: at most 3 running at once`) {
		t.Fatalf("queue keycap: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, own, err := e.store.KeyConcurrency(ctx, "q"); err != nil || own["tenant-42"] != 3 {
		t.Fatalf("stored caps %v, %v", own, err)
	}
	if out, _, code := e.cli("-o", "json", "queue", "keycap", "q", "tenant-7", "0"); code != exitOK || !strings.Contains(out, `"concurrency": 0`) {
		t.Fatalf("keycap 0 in JSON: exit %d, %q", code, out)
	}
	for _, bad := range [][]string{
		{"queue", "keycap", "q", "tenant-42"},
		{"queue", "keycap", "q", "tenant-42", "-1"},
		{"queue", "keycap", "q", "tenant-42", "10001"},
		{"queue", "keycap", "q", "tenant-42", "many"},
		{"queue", "keycap", "q", "a}b", "2"},
	} {
		if _, errOut, code := e.cli(bad...); code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", bad, code, errOut, exitUsage)
		}
	}
	if _, _, code := e.cli("queue", "keycap", "nosuch", "k", "2"); code != exitNotFound {
		t.Errorf("keycap in an unknown queue: exit %d, want %d", code, exitNotFound)
	}
	if out, _, code := e.cli("queue", "keycap", "q", "tenant-42", "default"); code != exitOK || !strings.Contains(out, "the queue's default cap applies") {
		t.Fatalf("keycap default: exit %d, %q", code, out)
	}
	if _, own, err := e.store.KeyConcurrency(ctx, "q"); err != nil || len(own) != 1 || own["tenant-7"] != 0 {
		t.Fatalf("caps after default: %v, %v", own, err)
	}
}

// TestQueueKeyrate: queue keyrate sets a key's own rate (defaults for the
// period and burst), --rate 0 lifts the default for it, --default drops
// it, and bad flags are usage errors.
func TestQueueKeyrate(t *testing.T) {
	t.Parallel()
	e := newCLIEnv(t, "kr")
	ctx := testenv.Ctx(t, 30*time.Second)
	if out, errOut, code := e.cli("queue", "keyrate", "q", "partner-7", "--rate", "50"); code != exitOK || !strings.Contains(out, `rated key "partner-7" of q: 50 per 1s, bursts of 1`) {
		t.Fatalf("queue keyrate: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, own, err := e.store.KeyRates(ctx, "q"); err != nil || own["partner-7"] != (shard.KeyRate{Rate: 50, Period: time.Second, Burst: 1}) {
		t.Fatalf("stored rates %v, %v", own, err)
	}
	if out, _, code := e.cli("-o", "json", "queue", "keyrate", "q", "partner-8", "--rate", "0"); code != exitOK || !strings.Contains(out, `"rate": 0`) {
		t.Fatalf("keyrate 0 in JSON: exit %d, %q", code, out)
	}
	if out, errOut, code := e.cli("queue", "keyrate", "q", "partner-9", "--rate", "20", "--period", "1m", "--kind", "sliding_window"); code != exitOK || !strings.Contains(out, `rated key "partner-9" of q: 20 per 1m0s by a sliding window`) {
		t.Fatalf("queue keyrate --kind: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if _, own, err := e.store.KeyRates(ctx, "q"); err != nil || own["partner-9"] != (shard.KeyRate{Rate: 20, Period: time.Minute, Burst: 1, Kind: shard.LimiterSlidingWindow}) {
		t.Fatalf("stored rates %v, %v", own, err)
	}
	for _, bad := range [][]string{
		{"queue", "keyrate", "q", "partner-7"},
		{"queue", "keyrate", "q", "partner-7", "--rate", "5", "--default"},
		{"queue", "keyrate", "q", "partner-7", "--rate", "-1"},
		{"queue", "keyrate", "q", "partner-7", "--rate", "5", "--period", "1500us"},
		{"queue", "keyrate", "q", "a}b", "--rate", "2"},
		{"queue", "keyrate", "q", "partner-7", "--rate", "2", "--kind", "bucket"},
		{"queue", "keyrate", "q", "partner-7", "--rate", "2", "--burst", "3", "--kind", "leaky_bucket"},
	} {
		if _, errOut, code := e.cli(bad...); code != exitUsage {
			t.Errorf("%v: exit %d (stderr %q), want %d", bad, code, errOut, exitUsage)
		}
	}
	if out, _, code := e.cli("queue", "keyrate", "q", "partner-7", "--default"); code != exitOK || !strings.Contains(out, "the queue's default rate applies") {
		t.Fatalf("keyrate --default: exit %d, %q", code, out)
	}
	if _, own, err := e.store.KeyRates(ctx, "q"); err != nil || len(own) != 2 {
		t.Fatalf("rates after --default: %v, %v", own, err)
	}
}
