package shard

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// EncodingVersion is the version written in front of every stored task.
const EncodingVersion = 1

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
