package worker

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// A worker whose queue no scheduler registered, or whose shard count
// differs from the schedulers', says so (log and metrics) at start instead
// of running silently while tasks go unseen.
func TestSetupMismatchDetected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy()) // the "schedulers" registered "q" in 2 shards
	for _, c := range []struct {
		name       string
		shards     int
		queue      string
		registered float64
	}{
		{"as registered", shards, "q", 1},
		{"unregistered queue", shards, "ghost", 0},
		{"more shards than the schedulers", shards + 1, "q", 0},
		{"fewer shards than the schedulers", shards - 1, "q", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			w, err := New(e.RDB, Config{Namespace: ns, Shards: c.shards, FetchTimeout: time.Second, Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Handle(c.queue, func(context.Context, *Task) error { return nil }, QueueOptions{}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			wantMismatch := flag(c.name != "as registered")
			testenv.WaitFor(t, 10*time.Second, "setup checked", func() (bool, string) {
				got, mm := gauge(t, reg, "hourglass_worker_queue_registered"), gauge(t, reg, "hourglass_worker_setup_mismatch")
				return got == c.registered && mm == wantMismatch, fmt.Sprintf("registered %v, mismatch %v", got, mm)
			})
		})
	}
}

// gauge returns the value of the single series of gauge family name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name && len(f.Metric) == 1 && f.GetType() == dto.MetricType_GAUGE {
			return f.Metric[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no single gauge %s", name)
	return 0
}
