package election

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hourglass-sched/hourglass/internal/confcheck"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and bounds for Config.
const (
	// DefaultTTL is the lease TTL used when Config.TTL is zero.
	DefaultTTL = 5 * time.Second
	// MinTTL is the shortest lease TTL accepted. Below it the keep-alive
	// period (TTL/3) and the self-fencing margin leave too little room
	// for an etcd round trip.
	MinTTL = 2 * time.Second
	// MaxTTL is the longest lease TTL accepted: a crashed replica's shards
	// stay unscanned for up to TTL.
	MaxTTL = time.Minute
)

// ReplicaIDRule describes the legal replica ids, for error messages: an
// id is one etcd key segment and a log value.
const ReplicaIDRule = `^[A-Za-z0-9_.-]{1,64}$`

var replicaIDRE = regexp.MustCompile(ReplicaIDRule)

// ValidReplicaID reports whether id is a legal Config.ReplicaID.
func ValidReplicaID(id string) bool { return replicaIDRE.MatchString(id) }

var (
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = errors.New("election: invalid config")
	// ErrAlreadyRunning is returned by Run when the manager is already
	// running or has run before; a Manager runs once.
	ErrAlreadyRunning = errors.New("election: manager already running")
	// ErrClientClosed is returned by Run when the etcd client it was
	// given has been closed: no lease can be kept or granted again, so
	// the manager stops its shard work at once instead of waiting for
	// the self-fencing clock, and returns.
	ErrClientClosed = errors.New("election: etcd client closed")
	// errValidityLost is the cause recorded when the self-fencing clock
	// runs out.
	errValidityLost = errors.New("election: lease validity lost")
	// errLeaseGone is the cause recorded when etcd says the lease no
	// longer exists.
	errLeaseGone = errors.New("election: lease not found")
)

// Config configures a Manager. New fills zero values with the documented
// defaults.
type Config struct {
	// Prefix is the etcd key prefix, for example "/hourglass/". Required;
	// must end in "/".
	Prefix string
	// ReplicaID identifies this replica. Required, unique per replica,
	// matching ReplicaIDRule.
	ReplicaID string
	// Shards is the initial number of shards N, from 1 to
	// shard.MaxShards. Manager.SetShards changes it at run time.
	Shards int
	// TTL is the lease TTL: a whole number of seconds (etcd grants no
	// other) from MinTTL to MaxTTL. Default DefaultTTL.
	TTL time.Duration
	// Logger receives the manager's logs, under the name "election".
	// Default hclog.NewNullLogger().
	Logger hclog.Logger
	// Registerer, when not nil, receives the manager's metrics. Two
	// managers cannot share one Registerer (their series would collide).
	Registerer prometheus.Registerer
}

// withDefaults returns c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	return c
}

// Validate reports every invalid field, each a *confcheck.FieldError
// wrapping ErrInvalidConfig. Zero values that New replaces with defaults (TTL,
// Logger, Registerer) are valid.
func (c Config) Validate() error {
	p := confcheck.New(ErrInvalidConfig)
	switch {
	case c.Prefix == "":
		p.Field("Prefix", "is required")
	case !strings.HasSuffix(c.Prefix, "/"):
		p.Field("Prefix", "must end in \"/\" (got %q)", c.Prefix)
	}
	switch {
	case c.ReplicaID == "":
		p.Field("ReplicaID", "is required")
	case !ValidReplicaID(c.ReplicaID):
		p.Field("ReplicaID", "must match %s (got %q)", ReplicaIDRule, c.ReplicaID)
	}
	p.IntRange("Shards", int64(c.Shards), 1, shard.MaxShards)
	if ttl := c.TTL; ttl != 0 {
		p.DurationRange("TTL", ttl, MinTTL, MaxTTL)
		p.Whole("TTL", ttl, time.Second)
	}
	return p.Err()
}

// opTimeout bounds every etcd call, and is also the keep-alive period.
func (c Config) opTimeout() time.Duration { return c.TTL / 3 }

// margin is how long before the conservative lease expiry the self-fencing
// watchdog cancels shard work: min(500ms, TTL/10).
func (c Config) margin() time.Duration { return min(500*time.Millisecond, c.TTL/10) }

// leaseSeconds is the TTL requested from etcd.
func (c Config) leaseSeconds() int64 { return int64(c.TTL / time.Second) }
