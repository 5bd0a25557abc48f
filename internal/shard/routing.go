package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"
)

// Routing says which workers may take a queue's tasks (docs/operations.md,
// "Canary workers"), by the version and the tags each worker carries
// (worker.Config.Version and Tags). The zero Routing lets every worker.
// Stored as JSON in field "|route|<queue>" of the paused hash, set and
// announced as the limits are (SetRouting), read by the workers with
// them (Controls).
type Routing struct {
	// NotTags excludes the workers that carry any of these tags:
	// ["canary"] is "not canary".
	NotTags []string `json:"not_tags,omitempty"`
	// Tags, when set, admits only the workers that carry all of them.
	Tags []string `json:"tags,omitempty"`
	// Versions, when set, admits only the workers of one of these
	// versions: "only version X".
	Versions []string `json:"versions,omitempty"`
	// Share, when set, splits the queue's tasks between a canary set of
	// the workers admitted and the others: the canary set takes a share
	// of the shards' ready lists, the others the rest (Share.Takes).
	Share *Share `json:"share,omitempty"`
}

// Share gives a canary set of workers a share of a queue's tasks. Tasks
// are spread evenly over the shards by their ids, so the share is taken
// by shard: the canary set pops the ready lists of Percent × n / 100 of
// the n shards, the other workers those of the rest. A fraction of a
// shard is a fraction of time: the canary set holds the boundary shard
// for that part of every SharePeriod, by the wall clock (Takes).
type Share struct {
	// Percent of the queue's tasks for the canary set, 1..99.
	Percent int `json:"percent"`
	// Tags and Versions name the canary set: the workers that carry any
	// of Tags or run one of Versions.
	Tags     []string `json:"tags,omitempty"`
	Versions []string `json:"versions,omitempty"`
}

// SharePeriod is the period whose part the canary set holds a share's
// boundary shard for (Share.Takes).
const SharePeriod = 10 * time.Second

// Has reports whether a worker of version with tags is in the canary set.
func (s Share) Has(version string, tags []string) bool {
	if slices.Contains(s.Versions, version) {
		return true
	}
	for _, t := range s.Tags {
		if slices.Contains(tags, t) {
			return true
		}
	}
	return false
}

// Split returns how the canary set takes n shards: full of them, and the
// boundary shard after them for part hundredths of each SharePeriod
// (10% of 16 shards: 1 and 60).
func (s Share) Split(n int) (full, part int) {
	u := s.Percent * n // hundredths of a shard
	return u / 100, u % 100
}

// Takes reports whether the ready lists of shard sh (of n) of queue are
// the canary set's (canary) or the other workers' at time now: the canary
// set takes the full shards of Split from one that the queue's name picks
// (so that queues sharing a canary spread over the shards), and the
// boundary shard after them during the first part of each SharePeriod.
func (s Share) Takes(queue string, canary bool, sh, n int, now time.Time) bool {
	if n <= 0 {
		return !canary
	}
	pos := (sh - s.Start(queue, n) + n) % n
	full, part := s.Split(n)
	in := pos < full
	if pos == full && part > 0 {
		in = s.inSlice(part, now)
	}
	return in == canary
}

// Any reports whether the canary set (canary) or the other workers take
// some shard of n at time now.
func (s Share) Any(canary bool, n int, now time.Time) bool {
	full, part := s.Split(n)
	if canary {
		return full > 0 || part > 0 && s.inSlice(part, now)
	}
	return n-full > 1 || part == 0 && n-full > 0 || part > 0 && !s.inSlice(part, now)
}

// NextChange returns when the boundary shard of n changes hands after
// now; zero when the split has no boundary shard.
func (s Share) NextChange(n int, now time.Time) time.Time {
	_, part := s.Split(n)
	if part == 0 {
		return time.Time{}
	}
	p := SharePeriod.Milliseconds()
	at := now.UnixMilli()
	base := at - at%p
	if cut := base + int64(part)*p/100; at < cut {
		return time.UnixMilli(cut)
	}
	return time.UnixMilli(base + p)
}

// inSlice reports whether now lies in the canary set's part (hundredths)
// of its SharePeriod.
func (s Share) inSlice(part int, now time.Time) bool {
	p := SharePeriod.Milliseconds()
	return now.UnixMilli()%p < int64(part)*p/100
}

// Start is the first shard of the canary set's for queue (of n).
func (s Share) Start(queue string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(queue))
	return int(h.Sum32() % uint32(n))
}

// String renders s for people: "10% to tagged canary".
func (s Share) String() string {
	var set []string
	if len(s.Tags) > 0 {
		set = append(set, "tagged "+strings.Join(s.Tags, " or "))
	}
	if len(s.Versions) > 0 {
		set = append(set, "version "+strings.Join(s.Versions, " or "))
	}
	return fmt.Sprintf("%d%% to %s", s.Percent, strings.Join(set, " or "))
}

// MaxRoutingItems bounds each list of a Routing.
const MaxRoutingItems = 32

// Validate reports a list too long or holding an empty or malformed item
// (tags and versions are 1..64 bytes of letters, digits and "._:+-").
func (r Routing) Validate() error {
	for _, f := range []struct {
		name string
		l    []string
	}{{"not_tags", r.NotTags}, {"tags", r.Tags}, {"versions", r.Versions}} {
		name, l := f.name, f.l
		if len(l) > MaxRoutingItems {
			return fmt.Errorf("%w: routing %s: %d items, at most %d", ErrInvalidArgument, name, len(l), MaxRoutingItems)
		}
		for _, s := range l {
			if !ValidTag(s) {
				return fmt.Errorf("%w: routing %s: %q must be 1..64 bytes of letters, digits and ._:+-", ErrInvalidArgument, name, s)
			}
		}
	}
	if sh := r.Share; sh != nil {
		if sh.Percent < 1 || sh.Percent > 99 {
			return fmt.Errorf("%w: routing share: %d%% not in 1..99", ErrInvalidArgument, sh.Percent)
		}
		if len(sh.Tags)+len(sh.Versions) == 0 {
			return fmt.Errorf("%w: routing share: no canary set (give its tags or versions)", ErrInvalidArgument)
		}
		return Routing{Tags: sh.Tags, Versions: sh.Versions}.Validate()
	}
	return nil
}

// ValidTag reports whether s may be a worker's tag or version.
func ValidTag(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return !strings.ContainsFunc(s, func(c rune) bool {
		return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._:+-", c))
	})
}

// IsZero reports whether r admits every worker.
func (r Routing) IsZero() bool {
	return len(r.NotTags) == 0 && len(r.Tags) == 0 && len(r.Versions) == 0 && r.Share == nil
}

// Admits reports whether a worker of version with tags may take the
// queue's tasks.
func (r Routing) Admits(version string, tags []string) bool {
	for _, t := range r.NotTags {
		if slices.Contains(tags, t) {
			return false
		}
	}
	for _, t := range r.Tags {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	return len(r.Versions) == 0 || slices.Contains(r.Versions, version)
}

// String renders r for people: "not tagged canary; version 1.4.2".
func (r Routing) String() string {
	var parts []string
	if len(r.NotTags) > 0 {
		parts = append(parts, "not tagged "+strings.Join(r.NotTags, " or "))
	}
	if len(r.Tags) > 0 {
		parts = append(parts, "tagged "+strings.Join(r.Tags, " and "))
	}
	if len(r.Versions) > 0 {
		parts = append(parts, "version "+strings.Join(r.Versions, " or "))
	}
	if r.Share != nil {
		parts = append(parts, "share "+r.Share.String())
	}
	if len(parts) == 0 {
		return "any worker"
	}
	return strings.Join(parts, "; ")
}

// SetRouting sets queue's routing (nil or a zero Routing: any worker) for
// the whole deployment and announces it on the control channel: each
// worker re-reads it at once. It reports whether it changed.
func (s *Store) SetRouting(ctx context.Context, queue string, r *Routing) (bool, error) {
	if !ValidQueue(queue) {
		return false, fmt.Errorf("%w: queue name %q", ErrInvalidArgument, queue)
	}
	if r == nil || r.IsZero() {
		return s.control(ctx, "unroute", queue, nil, "set the routing")
	}
	if err := r.Validate(); err != nil {
		return false, err
	}
	return s.control(ctx, "route", queue, r, "set the routing")
}

// parseRouting reads a stored routing.
func parseRouting(v string) (Routing, error) {
	var r Routing
	err := json.Unmarshal([]byte(v), &r)
	if err == nil {
		err = r.Validate()
	}
	return r, err
}
