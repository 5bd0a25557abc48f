package hourglass

import (
	"fmt"
	"strconv"
)

// Priority is a task's priority level (docs/fairness.md, "Priorities").
// It orders the tasks of one key of a fair queue (queues.<q>.fair; the
// tasks without a key share the key ""): while tasks of several levels
// wait, the levels share the key's turns by stride, 16 (high) : 4
// (normal) : 1 (low), so that a low task still starts under sustained
// high-priority load, within the bound docs/fairness.md states. Keys
// still take turns as before: a key cannot buy a larger share of the
// queue by marking its tasks high. A queue that is not fair keeps the
// level with the task (it applies once the queue is fair) and takes its
// tasks in due order.
type Priority int

// The levels. Their numbers are those of the protocol (docs/protocol.md,
// "Priorities").
const (
	// PriorityNormal is the default level.
	PriorityNormal Priority = 0
	// PriorityHigh gets 16 of every 21 of a key's turns while all three
	// levels have tasks waiting.
	PriorityHigh Priority = 1
	// PriorityLow gets 1 of every 21 of them.
	PriorityLow Priority = 2
)

// String returns "normal", "high" or "low".
func (p Priority) String() string {
	switch p {
	case PriorityNormal:
		return "normal"
	case PriorityHigh:
		return "high"
	case PriorityLow:
		return "low"
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
}

// Valid reports whether p is one of the three levels.
func (p Priority) Valid() bool { return p >= PriorityNormal && p <= PriorityLow }

// MarshalText renders p as String does, for JSON and flags.
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("%w: priority %d", ErrInvalidArgument, int(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads what ParsePriority reads.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err == nil {
		*p = v
	}
	return err
}

// ParsePriority reads "high", "normal" or "low" (or the numbers 1, 0, 2).
// Errors wrap ErrInvalidArgument.
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "high", "1":
		return PriorityHigh, nil
	case "normal", "0":
		return PriorityNormal, nil
	case "low", "2":
		return PriorityLow, nil
	}
	return 0, fmt.Errorf("%w: priority %q (want high, normal or low)", ErrInvalidArgument, s)
}
