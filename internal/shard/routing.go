package shard

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
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
	return len(r.NotTags) == 0 && len(r.Tags) == 0 && len(r.Versions) == 0
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
