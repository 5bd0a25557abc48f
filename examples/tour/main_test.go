package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/hourglasstest"
)

// TestTour runs the walk-through against servers of its own and checks
// every line it prints.
func TestTour(t *testing.T) {
	servers := hourglasstest.Start(t, hourglasstest.Options{NoScheduler: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := tour(ctx, &out, servers.RedisAddr(), servers.EtcdEndpoints()[0]); err != nil {
		t.Fatalf("tour: %v\nprinted:\n%s", err, out.String())
	}
	want := `sent to ada@example.com (attempt 2)
sent to alan@example.com (attempt 1)
sent to edsger@example.com (attempt 1)
sent to grace@example.com (attempt 1)
reminder-ada is scheduled
cancelled from scheduled then not found: true
periodic: sent to team@example.com (attempt 1)
dead: welcome-nobody (not retryable: no address)
`
	if out.String() != want {
		t.Fatalf("the tour printed\n%s\nwant\n%s", out.String(), want)
	}
}
