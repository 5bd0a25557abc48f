package worker

import (
	"context"
	"os"
	"regexp"
	"slices"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
)

// TestMetricsAsDocumented: a worker exports, from the moment its queues
// are registered, exactly the series docs/operations.md documents, each
// labelled by queue except fetch_errors_total (a fetch covers several
// queues) and setup_mismatch, as the docs say.
func TestMetricsAsDocumented(t *testing.T) {
	t.Parallel()
	e := newEnv(t, shardtest.Policy())
	_, reg, _ := e.start(e.RDB, QueueOptions{}, func(context.Context, *Task) error { return nil })
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, n := range regexp.MustCompile(`hourglass_worker_[a-z_]+`).FindAllString(string(doc), -1) {
		documented[n] = true
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var exported []string
	for _, f := range fams {
		name := f.GetName()
		exported = append(exported, name)
		if !documented[name] {
			t.Errorf("%s is exported but not documented", name)
		}
		for _, m := range f.Metric {
			hasQueue := slices.ContainsFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == "queue" })
			if want := name != "hourglass_worker_fetch_errors_total" && name != "hourglass_worker_setup_mismatch"; hasQueue != want {
				t.Errorf("%s: labelled by queue %v, documented %v", name, hasQueue, want)
			}
		}
	}
	for n := range documented {
		if !slices.Contains(exported, n) {
			t.Errorf("%s is documented but not exported before its first event", n)
		}
	}
}
