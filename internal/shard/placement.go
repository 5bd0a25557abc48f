package shard

import (
	"errors"
	"fmt"
	"hash/crc32"
	"regexp"
	"strconv"
	"strings"
)

// ErrInvalidLayout is returned by NewLayout for a bad namespace or count.
var ErrInvalidLayout = errors.New("hourglass: invalid layout")

var namespaceRE = regexp.MustCompile(NamespaceRule)

// NamespaceRule describes the legal namespaces, for error messages.
const NamespaceRule = `^[A-Za-z0-9_-]{1,32}$`

// ValidNamespace reports whether ns is a legal namespace.
func ValidNamespace(ns string) bool { return namespaceRE.MatchString(ns) }

// Layout is where tasks are placed: the shard count N, its generation (0
// for a deployment that was never resized, incremented by every change of
// the shard count; layout.go) and, while a change runs, the count being
// left (From): tasks are placed by Shards, and shards up to Existing exist.
// Where an id may live and the order to visit those shards in are
// answered by Homes (locate.go), for every state of a change. A Layout
// also carries the key names of its namespace (Keys). It is a value type;
// the zero Layout is invalid, build one with NewLayout.
type Layout struct {
	Keys
	shards int
	gen    int64
	from   int // 0: stable
	// place is the rule tasks are placed by under shards, fromPlace the
	// one a running change leaves (with from); both PlaceByID until an
	// operator switches the namespace to PlaceByKey.
	place, fromPlace Placement
}

// Placement is the rule that picks a task id's shard among N.
type Placement uint8

// The placement rules. A namespace starts with PlaceByID; an operator
// switches it to PlaceByKey with a change of the layout (BeginChange),
// which moves the keyed tasks to their key's shard as a change of the
// shard count moves tasks (docs/resharding.md).
const (
	// PlaceByID places a task by crc32 of its whole id.
	PlaceByID Placement = iota
	// PlaceByKey places a keyed task ("{key}rest", KeyOf) by crc32 of
	// its key, so that all tasks of a key share a shard (and the state a
	// script keeps per key is reachable where they are taken); a task
	// without a key is placed by its id.
	PlaceByKey
)

// String returns "id" or "key", the rule's name in the configuration,
// the CLI and the layout record.
func (p Placement) String() string {
	if p == PlaceByKey {
		return "key"
	}
	return "id"
}

// ParsePlacement returns the rule named s ("id" or "key").
func ParsePlacement(s string) (Placement, error) {
	switch s {
	case "id":
		return PlaceByID, nil
	case "key":
		return PlaceByKey, nil
	}
	return 0, fmt.Errorf("%w: placement %q: want id or key", ErrInvalidArgument, s)
}

// NewLayout returns the layout for namespace ns with n shards.
func NewLayout(ns string, n int) (Layout, error) {
	if !ValidNamespace(ns) {
		return Layout{}, fmt.Errorf("%w: namespace %q must match %s", ErrInvalidLayout, ns, NamespaceRule)
	}
	if n < 1 || n > MaxShards {
		return Layout{}, fmt.Errorf("%w: shard count %d not in 1..%d", ErrInvalidLayout, n, MaxShards)
	}
	return Layout{Keys: Keys{ns: ns}, shards: n}, nil
}

// Deployment defaults shared by the client, the worker and the
// configuration: every producer and consumer must agree on them.
const (
	DefaultNamespace = "hourglass"
	DefaultShards    = 16
)

// LayoutDefaults returns ns and n with "" and 0 replaced by
// DefaultNamespace and DefaultShards, for configs whose zero values mean
// the defaults: NewLayout(LayoutDefaults(ns, n)) validates them.
func LayoutDefaults(ns string, n int) (string, int) {
	if ns == "" {
		ns = DefaultNamespace
	}
	if n == 0 {
		n = DefaultShards
	}
	return ns, n
}

// MaxShards is the largest supported shard count.
const MaxShards = 4096

// Shards returns the shard count N: new tasks are placed by it.
func (l Layout) Shards() int { return l.shards }

// Gen returns the layout's generation (0: never resized).
func (l Layout) Gen() int64 { return l.gen }

// From returns the shard count a running change leaves, 0 when stable.
func (l Layout) From() int { return l.from }

// Resharding reports whether a change of the shard count (or of the
// placement rule) is running.
func (l Layout) Resharding() bool { return l.from > 0 }

// Placement returns the rule new tasks are placed by.
func (l Layout) Placement() Placement { return l.place }

// FromPlacement returns the rule a running change leaves (Placement when
// stable).
func (l Layout) FromPlacement() Placement {
	if l.from == 0 {
		return l.place
	}
	return l.fromPlace
}

// Existing returns the number of shards that exist, 0..Existing-1: those
// a read over every task visits and a worker pops, whether or not the
// shard count is changing (then it is the larger of Shards and From).
func (l Layout) Existing() int { return max(l.shards, l.from) }

// oldShardOf returns the shard of id by the count a running change
// leaves (From > 0); Homes says where an id may be.
func (l Layout) oldShardOf(id string) int { return placeOf(id, l.from, l.fromPlace) }

// ShardOf returns the shard of a task id: crc32 (IEEE) of the id's bytes
// modulo N, or under PlaceByKey of its key's bytes when it has one
// (KeyOf). Producers in other languages compute the same (for example
// Python's zlib.crc32).
func (l Layout) ShardOf(id string) int { return placeOf(id, l.shards, l.place) }

func placeOf(id string, n int, p Placement) int {
	if p == PlaceByKey {
		if k := KeyOf(id); k != "" {
			id = k
		}
	}
	return int(crc32.ChecksumIEEE([]byte(id)) % uint32(n))
}

// ReadyKeys returns the ready lists of the given queues in every shard
// (up to Existing),
// in shard order; workers block on them with Pop.
func (l Layout) ReadyKeys(queues []string) []string {
	keys := make([]string, 0, l.Existing()*len(queues))
	for sh := 0; sh < l.Existing(); sh++ {
		for _, q := range queues {
			keys = append(keys, l.Ready(sh, q))
		}
	}
	return keys
}

// ParseReady returns the shard and queue of a ready-list key.
func (l Layout) ParseReady(key string) (sh int, queue string, ok bool) {
	rest, ok := strings.CutPrefix(key, "{"+l.ns+":")
	if !ok {
		return 0, "", false
	}
	num, q, ok := strings.Cut(rest, "}:ready:")
	if !ok {
		return 0, "", false
	}
	sh, err := strconv.Atoi(num)
	if err != nil || sh < 0 || sh >= l.Existing() {
		return 0, "", false
	}
	return sh, q, true
}

// withChange returns l at generation gen with shards and from (0: stable),
// both placed by l's rules.
func (l Layout) withChange(gen int64, shards, from int) (Layout, error) {
	return l.withRules(gen, count{shards, l.place}, count{from, l.fromPlace})
}

// withRules returns l at generation gen placing tasks by to, leaving from
// (from.n 0: stable). A change that leaves the count and the rule as they
// are is no change.
func (l Layout) withRules(gen int64, to, from count) (Layout, error) {
	if to.n < 1 || to.n > MaxShards || from.n < 0 || from.n > MaxShards || gen < 0 {
		return Layout{}, fmt.Errorf("%w: generation %d, %d shards from %d", ErrCorruptLayout, gen, to.n, from.n)
	}
	if from == to || from.n == 0 {
		from = count{0, to.place}
	}
	l.gen, l.shards, l.place, l.from, l.fromPlace = gen, to.n, to.place, from.n, from.place
	return l, nil
}

// count is a shard count with the rule tasks are placed by under it, as
// the layout record and the markers write it: "16" (by id) or "16k" (by
// key).
type count struct {
	n     int
	place Placement
}

func (c count) String() string {
	if c.place == PlaceByKey {
		return strconv.Itoa(c.n) + "k"
	}
	return strconv.Itoa(c.n)
}

func parseCount(v string) (count, error) {
	c := count{}
	if d, ok := strings.CutSuffix(v, "k"); ok {
		v, c.place = d, PlaceByKey
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || (n == 0 && c.place != PlaceByID) {
		return count{}, fmt.Errorf("%w: shard count %q", ErrCorruptLayout, v)
	}
	c.n = n
	return c, nil
}

// target returns the count and rule tasks are placed by, and from those
// a running change leaves (stable: target).
func (l Layout) target() count { return count{l.shards, l.place} }
func (l Layout) source() count {
	if l.from == 0 {
		return l.target()
	}
	return count{l.from, l.fromPlace}
}

// markerValue is l as a shard's marker stores it: "gen|shards|from", a
// count followed by "k" when its tasks are placed by key.
func markerValue(l Layout) string {
	from := "0"
	if l.from > 0 {
		from = l.source().String()
	}
	return fmt.Sprintf("%d|%s|%s", l.gen, l.target(), from)
}
