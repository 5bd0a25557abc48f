package shard

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass"
)

// Protocol errors. They are the public package hourglass's values,
// because the public packages return them unchanged; callers test them
// with errors.Is. Every error of this package says "hourglass: " once, as
// the public packages' do (errtext.Errorf), since they return its errors
// as they are.
var (
	ErrDuplicate       = hourglass.ErrDuplicate
	ErrUnknownQueue    = hourglass.ErrUnknownQueue
	ErrPayloadTooLarge = hourglass.ErrPayloadTooLarge
	ErrInvalidArgument = hourglass.ErrInvalidArgument
	ErrNotFound        = hourglass.ErrNotFound
	ErrActive          = hourglass.ErrActive
	ErrDead            = hourglass.ErrDead
	ErrStaleToken      = hourglass.ErrStaleToken
	ErrNotReplicated   = hourglass.ErrNotReplicated
	// ErrUndecodable reports stored task data that is not a valid encoding.
	ErrUndecodable = errors.New("hourglass: undecodable task data")
	// ErrTryAgain reports an answer with nothing done that will change
	// shortly: send the same call again after a short wait (the client
	// does, for Config.RetryFor). ErrInTransit is one.
	ErrTryAgain = errors.New("hourglass: try again shortly")
	// ErrStaleEpoch reports a fenced script called with an epoch older
	// than the shard's current owner's.
	ErrStaleEpoch = errors.New("hourglass: stale epoch")
)

// ErrShardUnreadable is wrapped by PartialError: a read over several
// shards found some whose data it could not read.
var ErrShardUnreadable = errors.New("hourglass: some shards could not be read")

// PartialError reports a read over several shards (Depth,
// StoredEpochs) that some shards answered with an error reply instead of
// data: a key of the wrong type, a value a script cannot parse, a slot
// in the middle of a migration. The result holds every other shard.
// Failed maps each such shard to its error. A failure of the connection
// is not partial: it fails the whole read. It wraps ErrShardUnreadable.
type PartialError struct {
	Failed map[int]error
}

func (e *PartialError) Error() string {
	shards := make([]int, 0, len(e.Failed))
	for sh := range e.Failed {
		shards = append(shards, sh)
	}
	slices.Sort(shards)
	var b strings.Builder
	fmt.Fprintf(&b, "hourglass: %d shard(s) could not be read", len(shards))
	for _, sh := range shards {
		fmt.Fprintf(&b, "; shard %d: %v", sh, e.Failed[sh])
	}
	return b.String()
}

// Unwrap returns ErrShardUnreadable.
func (e *PartialError) Unwrap() error { return ErrShardUnreadable }

// partial collects the shards of a read that answered with an error
// reply (isReply); its err is nil when there were none.
type partial struct{ failed map[int]error }

// transientReplies are error replies that say the server cannot answer
// now (a slot migration or failover, a restart, a busy script), not that
// the shard's data is bad: like a failed connection, they fail the whole
// read, which the caller sends again.
var transientReplies = []string{"TRYAGAIN", "MOVED", "ASK", "CLUSTERDOWN", "LOADING", "READONLY", "MASTERDOWN", "BUSY", "NOSCRIPT"}

// add records shard sh's error and reports whether the read may go on:
// false for an error that is not a reply (the connection failed) or a
// transient one, which fails the whole read.
func (p *partial) add(sh int, err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	for _, prefix := range transientReplies {
		if redis.HasErrorPrefix(err, prefix) {
			return false
		}
	}
	if p.failed == nil {
		p.failed = map[int]error{}
	}
	p.failed[sh] = err
	return true
}

func (p *partial) err() error {
	if len(p.failed) == 0 {
		return nil
	}
	return &PartialError{Failed: p.failed}
}

// kindError is an error of a sentinel kind with its own message:
// errors.Is matches the kind, the message says what happened once.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }

// Unwrap returns the kind.
func (e *kindError) Unwrap() error { return e.kind }

// taskNotFound reports that no task id is stored: it reads
// `hourglass: task not found: "id"` and matches ErrNotFound.
func taskNotFound(id string) error {
	return &kindError{kind: ErrNotFound, msg: fmt.Sprintf("hourglass: task not found: %q", id)}
}
