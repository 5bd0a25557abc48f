package shard

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestRouting: a routing set is read back with the controls and announced;
// a cleared one is gone; one that cannot be read is reported, not
// dropped; Admits and Validate follow the rules docs/operations.md states.
func TestRouting(t *testing.T) {
	t.Parallel()
	s, rdb := newTestStore(t)
	ctx := testenv.Ctx(t, 10*time.Second)
	sub := rdb.Subscribe(ctx, s.k.ControlChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	r := Routing{NotTags: []string{"canary"}, Versions: []string{"1.4.2", "1.4.3"}}
	if changed, err := s.SetRouting(ctx, "mail", &r); err != nil || !changed {
		t.Fatalf("set: %v %v", changed, err)
	}
	if m, err := sub.ReceiveMessage(ctx); err != nil || m.Payload != "route mail" {
		t.Fatalf("announcement: %+v %v", m, err)
	}
	if changed, _ := s.SetRouting(ctx, "mail", &r); changed {
		t.Fatal("setting the same routing again reported a change")
	}
	if err := rdb.HSet(ctx, s.k.Paused(), "|route|default", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	c, err := s.Controls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Routes["mail"]; got.String() != "not tagged canary; version 1.4.2 or 1.4.3" || len(c.Paused) != 0 || c.BadRoutes["default"] == nil {
		t.Fatalf("controls: %+v", c)
	}
	if _, err := s.SetRouting(ctx, "mail", nil); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Controls(ctx); len(c.Routes) != 0 {
		t.Fatalf("cleared, still %+v", c.Routes)
	}
	for _, c := range []struct {
		version string
		tags    []string
		want    bool
	}{
		{"1.4.2", nil, true},
		{"1.4.2", []string{"canary"}, false},
		{"1.5.0", nil, false},
		{"1.4.3", []string{"eu", "blue"}, true},
	} {
		if got := r.Admits(c.version, c.tags); got != c.want {
			t.Errorf("Admits(%s, %v) = %v", c.version, c.tags, got)
		}
	}
	if !(Routing{Tags: []string{"canary"}}).Admits("x", []string{"eu", "canary"}) || (Routing{Tags: []string{"canary", "eu"}}).Admits("x", []string{"canary"}) {
		t.Error("Tags must all be carried")
	}
	// A share travels with the routing, and names its canary set.
	share := Routing{NotTags: []string{"broken"}, Share: &Share{Percent: 10, Tags: []string{"canary"}, Versions: []string{"2.0.0"}}}
	if _, err := s.SetRouting(ctx, "mail", &share); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Controls(ctx); c.Routes["mail"].Share == nil || c.Routes["mail"].String() != "not tagged broken; share 10% to tagged canary or version 2.0.0" {
		t.Fatalf("share read back as %+v", c.Routes["mail"])
	}
	if !share.Share.Has("2.0.0", nil) || !share.Share.Has("1.0.0", []string{"canary"}) || share.Share.Has("1.0.0", []string{"eu"}) {
		t.Error("Has: the canary set is the workers with any of its tags or versions")
	}
	for _, bad := range []Routing{{NotTags: []string{""}}, {Versions: []string{"1.0 beta"}}, {Tags: tooMany()},
		{Share: &Share{Percent: 0, Tags: []string{"c"}}}, {Share: &Share{Percent: 100, Tags: []string{"c"}}},
		{Share: &Share{Percent: 10}}, {Share: &Share{Percent: 10, Versions: []string{"a b"}}}} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Validate(%+v) = %v", bad, err)
		}
	}
	if _, err := s.SetRouting(ctx, "bad|queue", &r); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("a bad queue name: %v", err)
	}
}

// tooMany returns MaxRoutingItems+1 valid tags.
func tooMany() []string {
	out := make([]string, MaxRoutingItems+1)
	for i := range out {
		out[i] = fmt.Sprintf("t%d", i)
	}
	return out
}
