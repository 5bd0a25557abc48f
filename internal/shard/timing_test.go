package shard

import (
	"testing"
	"time"
)

// TestTimingBoundsCompose checks that what a worker may do with a popped,
// unleased task fits inside UnleasedGrace, as timing.go describes. Each
// row is one path; a change of a bound that breaks a path fails here.
func TestTimingBoundsCompose(t *testing.T) {
	t.Parallel()
	// The shortest time a late lease gets for its claim (and one retry)
	// after the latest moment it may start.
	const claimWindow = 100 * time.Millisecond
	giveUp := UnleasedGrace - LeaseMargin // the worker cancels the handler here
	for _, c := range []struct {
		path      string
		took, may time.Duration
	}{
		{"late lease starts, with time to claim, before the worker gives up", MaxLeaseAfter + claimWindow, giveUp},
		{"an unleased ack lands before the worker would give up", MaxLeaseAfter + MaxAckLinger, giveUp},
		{"the worker gives up before recovery may take the task back", giveUp, StrandedMinAge},
		{"recovery waits at least the grace", UnleasedGrace, StrandedMinAge},
		{"a staged batch covers every prefetch", MaxPrefetch, MaxStage},
		{"a hold covers every staged batch", MaxStage + HoldSlack, MaxHold},
	} {
		if c.took > c.may || c.took <= 0 {
			t.Errorf("%s: %s, must be at most %s", c.path, c.took, c.may)
		}
	}
	if LeaseMargin <= 0 || HoldSlack <= 0 {
		t.Errorf("margins must be positive: LeaseMargin %s, HoldSlack %s", LeaseMargin, HoldSlack)
	}
}
