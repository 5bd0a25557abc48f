package shard

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// EncodingVersion is the version Encode writes (text: "1|queue|...").
// enqueue.lua writes version 2 for a queue with an interned number
// (RegisterQueues, TaskEncoding); Decode reads both.
const EncodingVersion = 1

// v2Header is the length of a version 2 header: byte 2, then the queue
// number, attempts, max_retries, timeout_ms, due_ms and enqueued_ms,
// big-endian, in 2, 2, 2, 5, 6 and 6 bytes.
const v2Header = 24

// MaxIDLen is the longest task id accepted.
const MaxIDLen = 256

// QueueRule describes the legal queue names, for error messages.
const QueueRule = `^[A-Za-z0-9_.:-]{1,128}$`

var queueRE = regexp.MustCompile(QueueRule)

// ValidQueue reports whether name is a legal queue name.
func ValidQueue(name string) bool { return queueRE.MatchString(name) }

// IDRule describes the legal task ids, for error messages.
const IDRule = "1..256 bytes of UTF-8 without '|' and without control characters"

// ValidID reports whether id may be enqueued: 1..MaxIDLen bytes of valid
// UTF-8 without "|" and without control characters (Unicode's Cc: C0,
// DEL, C1, as unicode.IsControl). enqueue.lua applies the same rule
// (docs/protocol.md, "Task ids"), so producers in other languages are held
// to it too: an id travels in HTTP headers, environment variables, log
// lines and terminals, where CR/LF, NUL or ESC break or forge something.
func ValidID(id string) bool {
	if !ValidStoredID(id) || !utf8.ValidString(id) {
		return false
	}
	return !strings.ContainsFunc(id, unicode.IsControl)
}

// ValidStoredID reports whether id can name a stored task: 1..MaxIDLen
// bytes without "|", the rule enqueue held before ids with control
// characters or invalid UTF-8 were refused. Operations on stored tasks
// (lookup, cancel, delivery, dead-letter replay and purge) take such ids,
// so that a task stored before can still be found, delivered, cancelled
// or purged.
func ValidStoredID(id string) bool {
	return id != "" && len(id) <= MaxIDLen && !bytes.ContainsRune([]byte(id), '|')
}

// Task is a stored task, decoded.
type Task struct {
	ID         string
	Queue      string
	Attempts   int
	MaxRetries int
	// Priority is the task's level; the data keeps it in its
	// max_retries field (docs/protocol.md, "Task data").
	Priority Priority
	Timeout  time.Duration
	Due      time.Time
	Enqueued time.Time
	Payload  []byte
	// TraceParent is the W3C traceparent the producer sent with the task
	// ("" for none); TraceLink is the span id of its last failed attempt
	// ("" before one failed). The data keeps them before the payload
	// (docs/protocol.md, "Traces").
	TraceParent, TraceLink string
}

// Encode renders t in the stored format, version 1:
//
//	1|queue|attempts|max_retries|timeout_ms|due_ms|enqueued_ms|payload
func Encode(t Task) []byte {
	b := make([]byte, 0, 64+len(t.Queue)+len(t.Payload))
	b = strconv.AppendInt(b, EncodingVersion, 10)
	b = append(b, '|')
	b = append(b, t.Queue...)
	for _, n := range []int64{int64(t.Attempts), int64(retriesField(t)), t.Timeout.Milliseconds(), t.Due.UnixMilli(), t.Enqueued.UnixMilli()} {
		b = append(b, '|')
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, '|')
	b = append(b, traceContext(t)...)
	return append(b, t.Payload...)
}

// EncodeV2 renders t in the stored format version 2 with queue number
// qid (the queue's interned number, see TaskEncoding): the 24-byte
// header, then the payload. The scripts write it; Go writes it in tests.
func EncodeV2(t Task, qid uint16) []byte {
	b := make([]byte, v2Header, v2Header+len(t.Payload))
	b[0] = 2
	binary.BigEndian.PutUint16(b[1:], qid)
	binary.BigEndian.PutUint16(b[3:], uint16(t.Attempts))
	binary.BigEndian.PutUint16(b[5:], uint16(retriesField(t)))
	putUint(b[7:12], uint64(t.Timeout.Milliseconds()))
	putUint(b[12:18], uint64(t.Due.UnixMilli()))
	putUint(b[18:24], uint64(t.Enqueued.UnixMilli()))
	b = append(b, traceContext(t)...)
	return append(b, t.Payload...)
}

func putUint(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}

func getUint(b []byte) uint64 {
	var v uint64
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

// Decode parses a stored task of version 1. Errors wrap ErrUndecodable;
// version 2 data, whose queue is a number, needs DecodeWith.
func Decode(id string, blob []byte) (Task, error) { return DecodeWith(id, blob, nil) }

// QueueNameFunc returns the name of the queue with interned number qid:
// "" when there is none, an error when it could not be read (Redis
// unreachable), which is not the data's fault.
type QueueNameFunc func(qid uint16) (string, error)

// DecodeWith parses a stored task of version 1 or 2, reading the queue
// of version 2 data through names (nil: version 2 is undecodable).
// Errors wrap ErrUndecodable, but for a name that could not be read.
func DecodeWith(id string, blob []byte, names QueueNameFunc) (Task, error) {
	if len(blob) > 0 && blob[0] == 2 {
		return decodeV2(id, blob, names)
	}
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
	mr, prio, traced := splitRetries(int(n[1]))
	return withTrace(Task{
		ID:         id,
		Queue:      string(f[1]),
		Attempts:   int(n[0]),
		MaxRetries: mr,
		Priority:   prio,
		Timeout:    time.Duration(n[2]) * time.Millisecond,
		Due:        time.UnixMilli(n[3]),
		Enqueued:   time.UnixMilli(n[4]),
		Payload:    rest,
	}, traced), nil
}

func decodeV2(id string, blob []byte, names QueueNameFunc) (Task, error) {
	if len(blob) < v2Header {
		return Task{}, fmt.Errorf("%w: %q: version 2 header of %d bytes, want %d", ErrUndecodable, id, len(blob), v2Header)
	}
	qid := binary.BigEndian.Uint16(blob[1:])
	var q string
	if names != nil {
		var err error
		if q, err = names(qid); err != nil {
			return Task{}, fmt.Errorf("task %q: read the name of queue number %d: %w", id, qid, err)
		}
	}
	if q == "" {
		return Task{}, fmt.Errorf("%w: %q: unknown queue number %d", ErrUndecodable, id, qid)
	}
	mr, prio, traced := splitRetries(int(binary.BigEndian.Uint16(blob[5:])))
	return withTrace(Task{
		ID:         id,
		Queue:      q,
		Attempts:   int(binary.BigEndian.Uint16(blob[3:])),
		MaxRetries: mr,
		Priority:   prio,
		Timeout:    time.Duration(getUint(blob[7:12])) * time.Millisecond,
		Due:        time.UnixMilli(int64(getUint(blob[12:18]))),
		Enqueued:   time.UnixMilli(int64(getUint(blob[18:24]))),
		Payload:    blob[v2Header:],
	}, traced), nil
}
