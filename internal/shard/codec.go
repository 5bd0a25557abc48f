package shard

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// Protocol errors. They carry the "hourglass:" prefix because the public
// client returns them unchanged; callers test them with errors.Is.
var (
	// ErrDuplicate reports an enqueue of an id that is still live
	// (scheduled, ready, running or dead). Nothing was changed.
	ErrDuplicate = errors.New("hourglass: task id already exists")
	// ErrUnknownQueue reports a queue that no scheduler has registered.
	ErrUnknownQueue = errors.New("hourglass: unknown queue")
	// ErrPayloadTooLarge reports a payload above the configured maximum.
	ErrPayloadTooLarge = errors.New("hourglass: payload too large")
	// ErrInvalidArgument reports a malformed id, queue, time or option.
	ErrInvalidArgument = errors.New("hourglass: invalid argument")
	// ErrNotFound reports an id that is not stored.
	ErrNotFound = errors.New("hourglass: task not found")
	// ErrActive reports a cancel of a task that is running: leased, or
	// popped by a worker (which runs popped tasks before leasing them).
	ErrActive = errors.New("hourglass: task is running")
	// ErrUndecodable reports stored task data that is not a valid encoding.
	ErrUndecodable = errors.New("hourglass: undecodable task data")
	// ErrStaleToken reports an ack, nack, extend or release whose
	// delivery token is no longer the task's: its lease expired and the
	// task was rescheduled or delivered again.
	ErrStaleToken = errors.New("hourglass: stale delivery token")
	// ErrStaleEpoch reports a fenced script called with an epoch older
	// than the shard's current owner's.
	ErrStaleEpoch = errors.New("shard: stale epoch")
)

// EncodingVersion is the version written in front of every stored task.
const EncodingVersion = 1

// MaxIDLen is the longest task id accepted.
const MaxIDLen = 256

var queueRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidQueue reports whether name is a legal queue name.
func ValidQueue(name string) bool { return queueRE.MatchString(name) }

// ValidID reports whether id is a legal task id: 1..MaxIDLen bytes
// without "|".
func ValidID(id string) bool {
	return id != "" && len(id) <= MaxIDLen && !bytes.ContainsRune([]byte(id), '|')
}

// Task is a stored task, decoded.
type Task struct {
	ID         string
	Queue      string
	Attempts   int
	MaxRetries int
	Timeout    time.Duration
	Due        time.Time
	Enqueued   time.Time
	Payload    []byte
}

// Encode renders t in the stored format, version 1:
//
//	1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
func Encode(t Task) []byte {
	b := make([]byte, 0, 64+len(t.Queue)+len(t.Payload))
	b = strconv.AppendInt(b, EncodingVersion, 10)
	b = append(b, '|')
	b = append(b, t.Queue...)
	for _, n := range []int64{int64(t.Attempts), int64(t.MaxRetries), t.Timeout.Milliseconds(), t.Due.UnixMilli(), t.Enqueued.UnixMilli()} {
		b = append(b, '|')
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, '|')
	return append(b, t.Payload...)
}

// Decode parses a stored task. Errors wrap ErrUndecodable.
func Decode(id string, blob []byte) (Task, error) {
	var f [7][]byte
	rest := blob
	for i := range f {
		j := bytes.IndexByte(rest, '|')
		if j < 0 {
			return Task{}, fmt.Errorf("%w: %q: %d fields before payload, want 7", ErrUndecodable, id, i)
		}
		f[i], rest = rest[:j], rest[j+1:]
	}
	if string(f[0]) != strconv.Itoa(EncodingVersion) {
		return Task{}, fmt.Errorf("%w: %q: unsupported version %q", ErrUndecodable, id, f[0])
	}
	var n [5]int64
	for i := range n {
		v, err := strconv.ParseInt(string(f[i+2]), 10, 64)
		if err != nil || v < 0 {
			return Task{}, fmt.Errorf("%w: %q: field %d: %q", ErrUndecodable, id, i+2, f[i+2])
		}
		n[i] = v
	}
	if len(f[1]) == 0 {
		return Task{}, fmt.Errorf("%w: %q: empty queue", ErrUndecodable, id)
	}
	return Task{
		ID:         id,
		Queue:      string(f[1]),
		Attempts:   int(n[0]),
		MaxRetries: int(n[1]),
		Timeout:    time.Duration(n[2]) * time.Millisecond,
		Due:        time.UnixMilli(n[3]),
		Enqueued:   time.UnixMilli(n[4]),
		Payload:    rest,
	}, nil
}
