package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hourglass-sched/hourglass/internal/errtext"
)

// HistoryLen is how many outcomes a schedule's history keeps (fire.lua's
// KEYS[9]), newest first; the list expires HistoryTTL after its last
// entry, so that a removed schedule's goes too.
const (
	HistoryLen = 100
	HistoryTTL = 30 * 24 * time.Hour
)

// Outcomes in a schedule's history.
const (
	OutcomeFired     = "fired"
	OutcomeDuplicate = "duplicate"
	OutcomeRefused   = "refused"
	OutcomeSkipped   = "skipped"
)

// Occurrence is one entry of a schedule's history.
type Occurrence struct {
	// At is the occurrence (for a skip by the catch-up policy, the first
	// of those skipped).
	At time.Time `json:"at"`
	// Outcome is OutcomeFired (its task enqueued), OutcomeDuplicate (its
	// task was found live: fired before), OutcomeRefused (its task was
	// refused; Detail says why) or OutcomeSkipped (Detail says why:
	// paused, overlap, busy, or the catch-up policy).
	Outcome string `json:"outcome"`
	// Recorded is when the scheduler recorded it.
	Recorded time.Time `json:"recorded"`
	// TaskID is the occurrence's task id, for one whose task was stored
	// (fired, duplicate); "" for the others.
	TaskID string `json:"task_id,omitempty"`
	// Detail says why a skip or a refusal happened.
	Detail string `json:"detail,omitempty"`
	// CaughtUp marks an occurrence fired late, after it was missed while
	// no scheduler ran (catch_up latest or all).
	CaughtUp bool `json:"caught_up,omitempty"`
	// Count is how many occurrences the entry stands for: 1, or those the
	// catch-up policy skipped at once.
	Count int `json:"count"`
}

// historyEntry is an Occurrence as the list holds it (JSON).
type historyEntry struct {
	Occ    int64  `json:"occ"`
	Out    string `json:"outcome"`
	At     int64  `json:"at"`
	ID     string `json:"id"`
	Detail string `json:"detail"`
	Caught int    `json:"caught"`
	Count  int    `json:"count,omitempty"`
}

// ScheduleHistory returns schedule name's last n outcomes (at most
// HistoryLen), newest first, from its home shard by the current layout.
// An entry that cannot be read is returned with Outcome "unreadable".
func (s *Store) ScheduleHistory(ctx context.Context, name string, n int) ([]Occurrence, error) {
	if n <= 0 || n > HistoryLen {
		n = HistoryLen
	}
	l := s.Layout()
	raw, err := s.rdb.LRange(ctx, l.ScheduleHistory(l.HomeShard(name), name), 0, int64(n-1)).Result()
	if err != nil {
		return nil, errtext.Errorf("history of schedule %q: %w", name, err)
	}
	out := make([]Occurrence, len(raw))
	for i, r := range raw {
		var e historyEntry
		if err := json.Unmarshal([]byte(r), &e); err != nil {
			out[i] = Occurrence{Outcome: "unreadable", Detail: fmt.Sprintf("%.200q", r)}
			continue
		}
		out[i] = Occurrence{At: time.UnixMilli(e.Occ), Outcome: e.Out, Recorded: time.UnixMilli(e.At), TaskID: e.ID,
			Detail: e.Detail, CaughtUp: e.Caught == 1, Count: max(e.Count, 1)}
	}
	return out, nil
}
