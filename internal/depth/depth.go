// Package depth exports queue depths as Prometheus gauges: per queue and
// shard, the tasks scheduled, ready, in flight and dead, and per queue
// whether it is paused. A scheduler replica exports the shards it owns
// only, so summing over replicas counts each shard once.
//
// Cost: a scrape makes one pipelined round trip of one depth.lua call per
// owned shard (each a few O(1) reads per queue: at 16 shards × 10 queues
// about 22 commands per shard) plus one HGETALL of the paused set. Scrapes
// that come within MinInterval of the last collection reuse its result,
// and one collection runs at a time, so however often Prometheus (or
// several of them) scrape, Redis sees at most one collection per
// MinInterval.
package depth

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// MinInterval is the least time between two collections from Redis.
const MinInterval = time.Second

// Timeout bounds one collection; a scrape that takes longer reports the
// error gauge instead of depths.
const Timeout = 2 * time.Second

var (
	tasksDesc = prometheus.NewDesc("hourglass_queue_tasks",
		"Tasks of the queue in the shard by state (scheduled, ready, in_flight, dead); exported by the shard's owner.",
		[]string{"queue", "shard", "state"}, nil)
	pausedDesc = prometheus.NewDesc("hourglass_queue_paused",
		"1 while the queue is paused, else 0 (every replica exports it; take max).",
		[]string{"queue"}, nil)
	errorDesc = prometheus.NewDesc("hourglass_queue_depth_errors",
		"1 when the last collection of queue depths failed (Redis unreachable or slow) or left out a shard whose data could not be read, else 0.",
		nil, nil)
)

// Collector is a prometheus.Collector of queue depths.
type Collector struct {
	store *shard.Store
	owned func() []int
	log   hclog.Logger
	now   func() time.Time

	mu      sync.Mutex // one collection at a time; guards the fields below
	at      time.Time
	metrics []prometheus.Metric
	failed  bool
}

// New returns a Collector of the depths of the shards owned returns.
func New(store *shard.Store, owned func() []int, log hclog.Logger) *Collector {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &Collector{store: store, owned: owned, log: log, now: time.Now}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tasksDesc
	ch <- pausedDesc
	ch <- errorDesc
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() || c.now().Sub(c.at) >= MinInterval {
		c.refresh()
	}
	for _, m := range c.metrics {
		ch <- m
	}
	ch <- prometheus.MustNewConstMetric(errorDesc, prometheus.GaugeValue, flag(c.failed))
}

// refresh reads the depths from Redis.
func (c *Collector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c.at = c.now()
	shards := c.owned()
	slices.Sort(shards)
	depths, err := c.store.Depth(ctx, shards)
	// A shard whose data cannot be read (shard.PartialError) is left out;
	// the others are exported, and the error gauge says something is
	// missing.
	var part *shard.PartialError
	unread := errors.As(err, &part)
	problem := err
	if unread {
		err = nil
	}
	var paused map[string]time.Time
	if err == nil {
		paused, err = c.store.Paused(ctx)
	}
	if err != nil || unread {
		if !c.failed {
			c.log.Warn("could not collect queue depths", "error", errors.Join(problem, err))
		}
		c.failed = true
	} else {
		c.failed = false
	}
	if err != nil {
		c.metrics = nil
		return
	}
	c.metrics = c.metrics[:0]
	queues := map[string]bool{}
	for i, ds := range depths {
		sh := strconv.Itoa(shards[i])
		for _, d := range ds {
			queues[d.Queue] = true
			for _, s := range []struct {
				state string
				n     int64
			}{{"scheduled", d.Scheduled}, {"ready", d.Ready}, {"in_flight", d.Leased + d.Popped}, {"dead", d.Dead}} {
				c.metrics = append(c.metrics, prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(s.n), d.Queue, sh, s.state))
			}
		}
	}
	for q := range queues {
		_, p := paused[q]
		c.metrics = append(c.metrics, prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, flag(p), q))
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
