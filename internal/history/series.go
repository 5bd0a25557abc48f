package history

import (
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Step is a run of minutes summed: counters and histogram added, the
// depth and the oldest age the largest of the step's minutes.
type Step struct {
	At time.Time
	shard.Minute
}

// Steps sums minutes (one per minute, oldest first, as
// shard.Store.QueueHistory returns them) into steps of step (a whole
// number of minutes, at least one), aligned to multiples of step since
// the Unix epoch.
func Steps(minutes []shard.QueueMinute, step time.Duration) []Step {
	step = max(step.Truncate(time.Minute), time.Minute)
	secs := int64(step / time.Second)
	var out []Step
	for _, m := range minutes {
		u := m.At.Unix()
		at := time.Unix(u-((u%secs)+secs)%secs, 0).UTC() // Truncate aligns to year 1, not to the epoch
		if len(out) == 0 || !out[len(out)-1].At.Equal(at) {
			out = append(out, Step{At: at})
		}
		out[len(out)-1].Add(&m.Minute)
	}
	return out
}

// Quantile estimates the q-quantile (0 < q ≤ 1) of the lateness that
// m's histogram counts, interpolating linearly inside the bucket it
// falls in; the last bucket (beyond every bound) answers its lower
// bound. ok is false when the histogram is empty.
func Quantile(m *shard.Minute, q float64) (d time.Duration, ok bool) {
	var total uint64
	for _, n := range m.Late {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var below uint64
	for i, n := range m.Late {
		if n == 0 || float64(below+n) < rank {
			below += n
			continue
		}
		var lo time.Duration
		if i > 0 {
			lo = shard.LateBounds[i-1]
		}
		if i == len(shard.LateBounds) {
			return lo, true
		}
		hi := shard.LateBounds[i]
		frac := (rank - float64(below)) / float64(n)
		return lo + time.Duration(frac*float64(hi-lo)), true
	}
	return shard.LateBounds[len(shard.LateBounds)-1], true
}
