package election

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	good := Config{Prefix: "/hg/", ReplicaID: "a", Shards: 4}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string // substring; empty means valid
	}{
		{"valid", func(*Config) {}, ""},
		{"valid with TTL", func(c *Config) { c.TTL = 3 * time.Second }, ""},
		{"missing prefix", func(c *Config) { c.Prefix = "" }, "Prefix is required"},
		{"prefix without slash", func(c *Config) { c.Prefix = "/hg" }, `must end in "/"`},
		{"missing replica", func(c *Config) { c.ReplicaID = "" }, "ReplicaID is required"},
		{"replica with slash", func(c *Config) { c.ReplicaID = "a/b" }, "must match"},
		{"replica too long", func(c *Config) { c.ReplicaID = strings.Repeat("r", 65) }, "must match"},
		{"long TTL", func(c *Config) { c.TTL = MaxTTL + time.Second }, "TTL must be at most 1m0s"},
		{"fractional TTL", func(c *Config) { c.TTL = 2500 * time.Millisecond }, "whole number of seconds"},
		{"zero shards", func(c *Config) { c.Shards = 0 }, "Shards must be between 1 and 4096 (got 0)"},
		{"negative shards", func(c *Config) { c.Shards = -1 }, "(got -1)"},
		{"max shards", func(c *Config) { c.Shards = shard.MaxShards }, ""},
		{"too many shards", func(c *Config) { c.Shards = shard.MaxShards + 1 }, "Shards must be between"},
		{"short TTL", func(c *Config) { c.TTL = time.Second }, "TTL must be at least 2s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.mod(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %q, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigValidateReportsAll(t *testing.T) {
	t.Parallel()
	err := Config{}.Validate()
	for _, want := range []string{"Prefix", "ReplicaID", "Shards"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	t.Parallel()
	if _, err := New(nil, Config{Prefix: "/hg/", ReplicaID: "a", Shards: 1}, func(_ context.Context, _ int, _ int64) {}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New(nil client) = %v, want ErrInvalidConfig", err)
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Prefix: "/hg/", ReplicaID: "a", Shards: 1}.withDefaults()
	if c.TTL != DefaultTTL || c.Logger == nil {
		t.Fatalf("withDefaults() = TTL %s, Logger %v", c.TTL, c.Logger)
	}
	if got := c.margin(); got != 500*time.Millisecond {
		t.Errorf("margin = %s, want 500ms", got)
	}
	c.TTL = 2 * time.Second
	if got := c.margin(); got != 200*time.Millisecond {
		t.Errorf("margin = %s, want 200ms", got)
	}
	c.TTL = 3 * time.Second
	if got := c.leaseSeconds(); got != 3 {
		t.Errorf("leaseSeconds = %d, want 3", got)
	}
}

func TestQuota(t *testing.T) {
	t.Parallel()
	tests := []struct {
		n, r int
		want []int // quota of each index
	}{
		{16, 3, []int{6, 5, 5}},
		{16, 2, []int{8, 8}},
		{16, 4, []int{4, 4, 4, 4}},
		{16, 1, []int{16}},
		{2, 3, []int{1, 1, 0}},
		{1, 1, []int{1}},
	}
	for _, tt := range tests {
		var got []int
		sum := 0
		for i := range tt.r {
			q := quota(tt.n, tt.r, i)
			got = append(got, q)
			sum += q
		}
		if !slices.Equal(got, tt.want) || sum != tt.n {
			t.Errorf("quota(%d, %d, i) = %v (sum %d), want %v", tt.n, tt.r, got, sum, tt.want)
		}
	}
	if q := quota(16, 3, -1); q != 0 {
		t.Errorf("quota for a non-member = %d, want 0", q)
	}
}

func TestCandidates(t *testing.T) {
	t.Parallel()
	all := func(int) bool { return true }
	tests := []struct {
		name     string
		n, r, me int
		free     func(int) bool
		want     []int
	}{
		{"preferred first", 7, 3, 1, all, []int{1, 4, 0, 2, 3, 5, 6}},
		{"skips taken", 7, 3, 1, func(s int) bool { return s != 4 && s != 0 }, []int{1, 2, 3, 5, 6}},
		{"single replica", 3, 1, 0, all, []int{0, 1, 2}},
	}
	for _, tt := range tests {
		if got := candidates(tt.n, tt.r, tt.me, tt.free); !slices.Equal(got, tt.want) {
			t.Errorf("%s: candidates = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key   string
		kind  keyKind
		id    string
		shard int
	}{
		{"/hg/members/a", kindMember, "a", 0},
		{"/hg/shards/0012", kindShard, "", 12},
		{ShardKey("/hg/", 12345), kindShard, "", 12345},
		{"/hg/shards/x", kindOther, "", 0},
		{"/hg/members/", kindOther, "", 0},
		{"/other/members/a", kindOther, "", 0},
	}
	for _, tt := range tests {
		kind, id, shard := parseKey("/hg/", tt.key)
		if kind != tt.kind || id != tt.id || shard != tt.shard {
			t.Errorf("parseKey(%q) = %v %q %d, want %v %q %d", tt.key, kind, id, shard, tt.kind, tt.id, tt.shard)
		}
	}
	if got := ShardKey("/hg/", 7); got != "/hg/shards/0007" {
		t.Errorf("ShardKey = %q", got)
	}
}
