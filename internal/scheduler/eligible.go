package scheduler

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hourglass-sched/hourglass/inspect"
)

// eligibleCollector exports, per queue, the live workers that serve it
// and its routing admits (inspect.Eligible): 0 for a queue of this
// scheduler's configuration that no worker may take tasks of. It reads
// the process registry when scraped, and only then.
type eligibleCollector struct {
	in     *inspect.Inspector
	queues []string // this scheduler's queues, reported even with no worker
	desc   *prometheus.Desc
}

func newEligibleCollector(in *inspect.Inspector, queues []string) *eligibleCollector {
	return &eligibleCollector{in: in, queues: queues, desc: prometheus.NewDesc("hourglass_queue_eligible_workers",
		"Live workers that serve the queue and its routing (hourglass queue route) admits; 0: no eligible worker, the queue's tasks wait. Read from the process registry at each scrape: the queues some live worker serves, and this scheduler's configured queues (0 when none does).",
		[]string{"queue"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *eligibleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector: a failed read, bounded by a
// second, reports nothing this time.
func (c *eligibleCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := c.in.Eligible(ctx)
	if err != nil {
		return
	}
	for _, q := range c.queues {
		if _, ok := n[q]; !ok {
			n[q] = 0
		}
	}
	for _, q := range slices.Sorted(maps.Keys(n)) {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[q]), q)
	}
}
