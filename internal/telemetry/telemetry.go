// Package telemetry holds what the metrics of every Hourglass component
// share, so that figures from schedulers and workers can be compared and
// merged: the lateness buckets of the scheduler's move-time histogram and
// the worker's handler-start histogram are one list.
package telemetry

// LatenessBuckets are the histogram buckets for lateness, in seconds:
// fine around the millisecond bars of the brief, coarse beyond a second.
var LatenessBuckets = []float64{
	0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.02,
	0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
}
