package election

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
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
)

var (
	// ErrInvalidConfig is wrapped by every error Config.Validate returns.
	ErrInvalidConfig = errors.New("election: invalid config")
	// ErrAlreadyRunning is returned by Run when the manager is already
	// running or has run before; a Manager runs once.
	ErrAlreadyRunning = errors.New("election: manager already running")
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
	// must not contain "/".
	ReplicaID string
	// Shards is the number of shards N (>= 1).
	Shards int
	// TTL is the lease TTL. Default DefaultTTL, minimum MinTTL. etcd
	// leases have whole-second TTLs: the lease is granted with TTL
	// rounded up to a second, while the self-fencing clock keeps using
	// TTL itself (the shorter of the two), which is conservative.
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

// Validate reports every invalid field, each error wrapping
// ErrInvalidConfig. Zero values that New replaces with defaults (TTL,
// Logger, Registerer) are valid.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	switch {
	case c.Prefix == "":
		bad("Prefix is required")
	case !strings.HasSuffix(c.Prefix, "/"):
		bad("Prefix %q must end in \"/\"", c.Prefix)
	}
	switch {
	case c.ReplicaID == "":
		bad("ReplicaID is required")
	case strings.Contains(c.ReplicaID, "/"):
		bad("ReplicaID %q must not contain \"/\"", c.ReplicaID)
	}
	if c.Shards < 1 {
		bad("Shards is %d, must be >= 1", c.Shards)
	}
	if c.TTL != 0 && c.TTL < MinTTL {
		bad("TTL %s is below the minimum %s", c.TTL, MinTTL)
	}
	return errors.Join(errs...)
}

// opTimeout bounds every etcd call, and is also the keep-alive period.
func (c Config) opTimeout() time.Duration { return c.TTL / 3 }

// margin is how long before the conservative lease expiry the self-fencing
// watchdog cancels shard work: min(500ms, TTL/10).
func (c Config) margin() time.Duration { return min(500*time.Millisecond, c.TTL/10) }

// leaseSeconds is the TTL requested from etcd, rounded up to a second.
func (c Config) leaseSeconds() int64 { return int64((c.TTL + time.Second - 1) / time.Second) }
