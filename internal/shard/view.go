package shard

import (
	"encoding/json"
	"strings"
	"time"

	"github.com/hourglass-sched/hourglass"
)

// The public view of a stored task (hourglass.TaskInfo), built in one
// place from what a lookup (Info) or a listing (Entry) read, so that
// client.Lookup, inspect's Task and inspect's listings report a task the
// same way.

// View returns the looked-up task as the public packages report it, with
// its whole payload.
func (in Info) View() hourglass.TaskInfo {
	return view(rawTask{
		id: in.Task.ID, state: in.State, shard: in.Shard, data: in.Task, decodeErr: in.DecodeErr,
		corruptDue: in.CorruptDue, at: in.At, dead: in.DeadInfo, lastError: in.LastError, size: -2, result: in.Result,
	})
}

// View returns the listed task, found in state in shard sh, as the public
// packages report it: its Payload is the entry's preview (at most
// PagePreview bytes), PayloadSize the whole payload's length.
func (e Entry) View(state string, sh int) hourglass.TaskInfo {
	r := rawTask{id: e.ID, state: state, shard: sh, corruptDue: e.BadScore, dead: e.DeadInfo, lastError: e.LastError, size: e.PayloadSize}
	if e.Score > 0 {
		r.at = time.UnixMilli(e.Score)
	}
	if e.Blob == "" {
		r.decodeErr = noData(e.ID)
	} else {
		r.data, r.decodeErr = DecodeWith(e.ID, []byte(e.Blob), e.names)
	}
	return view(r)
}

// rawTask is what a lookup or a listing read of one task.
type rawTask struct {
	id, state string
	shard     int
	data      Task
	decodeErr error
	// corruptDue: a scheduled task whose delayed-set score is no due
	// time (ValidDue).
	corruptDue bool
	// at is the set's time: the lease deadline of an active task, the
	// burial time of a dead one (used when its record has none).
	at              time.Time
	dead, lastError string
	// size is the whole payload's length when the payload read is a
	// preview; -2 when it is the whole payload.
	size int64
	// result is a succeeded task's result, from its record.
	result []byte
}

// CorruptDueProblem is the Problem of a scheduled task whose delayed-set
// score is not a due time (ValidDue).
const CorruptDueProblem = "corrupt due time: the shard's owner dead-letters it (reason \"corrupt due time\")"

// view builds the public view of r.
func view(r rawTask) hourglass.TaskInfo {
	t := hourglass.TaskInfo{ID: r.id, State: hourglass.State(r.state), Shard: r.shard, LastError: r.lastError, PayloadSize: -1}
	if r.decodeErr != nil {
		// A field of a view, not an error: said without the errors' prefix.
		t.Problem = strings.TrimPrefix(r.decodeErr.Error(), "hourglass: ")
	} else {
		d := r.data
		t.Queue, t.Attempts, t.MaxRetries, t.Timeout, t.Priority = d.Queue, d.Attempts, d.MaxRetries, d.Timeout, d.Priority
		t.Due, t.Enqueued, t.Payload, t.PayloadSize = d.Due, d.Enqueued, d.Payload, int64(len(d.Payload))
		if r.size >= 0 {
			t.PayloadSize = r.size
		}
		if d.TraceParent != "" {
			t.TraceID = d.TraceParent[3:35]
		}
	}
	if r.corruptDue {
		t.Problem = CorruptDueProblem
	}
	switch t.State {
	case hourglass.StateActive:
		t.LeaseDeadline = r.at
	case hourglass.StateCancelled, hourglass.StateSucceeded:
		t.Ended, t.Result = r.at, r.result
	case hourglass.StateDead:
		t.Dead = deadInfo(r.dead, r.at)
		if t.LastError == "" {
			t.LastError = t.Dead.Error
		}
	}
	return t
}

// deadInfo parses a burial record; at is the burial time from the
// dead-letter set, used when the record lacks one.
func deadInfo(js string, at time.Time) *hourglass.DeadInfo {
	var rec struct {
		Reason string `json:"reason"`
		Error  string `json:"error"`
		At     int64  `json:"at"`
	}
	_ = json.Unmarshal([]byte(js), &rec) // a missing or bad record leaves it empty
	d := &hourglass.DeadInfo{Reason: rec.Reason, Error: rec.Error, At: at}
	if rec.At != 0 {
		d.At = time.UnixMilli(rec.At)
	}
	return d
}
