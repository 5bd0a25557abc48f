package dashboard

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hourglass-sched/hourglass/inspect"
)

// HistoryPoints is about the most points a chart of the queue page gets:
// history picks the step that keeps a range under it.
const HistoryPoints = 360

// historySteps are the steps history picks from, in minutes.
var historySteps = []int{1, 2, 5, 10, 15, 30, 60, 120}

// historyStep returns the smallest step of historySteps that keeps since
// within HistoryPoints points.
func historyStep(since time.Duration) time.Duration {
	for _, m := range historySteps {
		if step := time.Duration(m) * time.Minute; since/step <= HistoryPoints {
			return step
		}
	}
	return time.Duration(historySteps[len(historySteps)-1]) * time.Minute
}

// historyColumns is the body of GET /ui/api/history: a queue's history
// in columns, as uPlot takes its data. A lateness quantile is null for a
// step without starts.
type historyColumns struct {
	Queue     string     `json:"queue"`
	StepS     int64      `json:"step_s"`
	At        []int64    `json:"at"` // unix seconds of each step's start
	Enqueued  []uint64   `json:"enqueued"`
	Started   []uint64   `json:"started"`
	Succeeded []uint64   `json:"succeeded"`
	Retried   []uint64   `json:"retried"`
	Dead      []uint64   `json:"dead"`
	Cancelled []uint64   `json:"cancelled"`
	P50Ms     []*float64 `json:"p50_ms"`
	P99Ms     []*float64 `json:"p99_ms"`
	Ready     []uint64   `json:"ready"`
	OldestS   []float64  `json:"oldest_s"`
}

// history answers queue ?queue='s history over ?since= (a duration, 1m
// up to inspect.HistoryKeep; default 1h), in the step historyStep picks.
func (d *dash) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	since := time.Hour
	if s := q.Get("since"); s != "" {
		var err error
		if since, err = time.ParseDuration(s); err != nil || since < time.Minute || since > inspect.HistoryKeep {
			d.fail(w, fmt.Errorf("%w: since %q: want a duration from 1m to %s", inspect.ErrInvalidArgument, s, inspect.HistoryKeep))
			return
		}
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	step := historyStep(since)
	to := time.Now()
	h, err := d.o.Inspector.QueueHistory(ctx, q.Get("queue"), to.Add(-since), to, step)
	if err != nil {
		d.fail(w, err)
		return
	}
	c := historyColumns{Queue: q.Get("queue"), StepS: int64(step / time.Second)}
	ms := func(d time.Duration) *float64 {
		if d < 0 {
			return nil
		}
		v := float64(d) / float64(time.Millisecond)
		return &v
	}
	for _, s := range h {
		c.At = append(c.At, s.At.Unix())
		c.Enqueued = append(c.Enqueued, s.Enqueued)
		c.Started = append(c.Started, s.Started)
		c.Succeeded = append(c.Succeeded, s.Succeeded)
		c.Retried = append(c.Retried, s.Retried)
		c.Dead = append(c.Dead, s.Dead)
		c.Cancelled = append(c.Cancelled, s.Cancelled)
		c.P50Ms = append(c.P50Ms, ms(s.LatenessP50))
		c.P99Ms = append(c.P99Ms, ms(s.LatenessP99))
		c.Ready = append(c.Ready, s.Ready)
		c.OldestS = append(c.OldestS, s.OldestReady.Seconds())
	}
	writeJSON(w, c)
}
