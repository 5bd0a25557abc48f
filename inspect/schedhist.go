package inspect

import (
	"context"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Occurrence is one entry of a periodic schedule's history: an occurrence
// fired (its task enqueued), found fired already, refused, or skipped,
// and why (docs/periodic.md, "History").
type Occurrence = shard.Occurrence

// The outcomes of an Occurrence.
const (
	OutcomeFired     = shard.OutcomeFired
	OutcomeDuplicate = shard.OutcomeDuplicate
	OutcomeRefused   = shard.OutcomeRefused
	OutcomeSkipped   = shard.OutcomeSkipped
)

// MaxHistory is the most outcomes a schedule's history keeps.
const MaxHistory = shard.HistoryLen

// ScheduleHistory returns the last limit outcomes of periodic schedule
// name (0, or more than MaxHistory: all that are kept), newest first:
// fired, found fired already, refused (with why), skipped (paused, the
// last task still running under overlap skip, or missed and not caught
// up by the catch-up policy, several at once), and those fired late by
// catch-up marked CaughtUp. Empty for a schedule that never fired, or
// whose history expired (30 days after its last entry). After a change
// of the shard count moves the schedule's home shard, its history starts
// anew there. ErrInvalidArgument for a name no schedule can have.
func (i *Inspector) ScheduleHistory(ctx context.Context, name string, limit int) ([]Occurrence, error) {
	if !scheduleName.MatchString(name) {
		return nil, errorf(ErrInvalidArgument, "schedule name %q", name)
	}
	if _, err := i.layout(ctx); err != nil {
		return nil, err
	}
	h, err := i.store.ScheduleHistory(ctx, name, limit)
	return h, mapErr(err)
}
