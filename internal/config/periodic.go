package config

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/hourglass-sched/hourglass/periodic"
)

// PeriodicConfig declares one periodic schedule, read by the schedulers
// (package periodic says what each field means). The schedule's name is
// its key in the periodic section; in the configuration it may not
// contain dots.
type PeriodicConfig struct {
	// Queue of the tasks; it must be one of the configured queues.
	Queue string `koanf:"queue"`
	// Payload of every task, as text.
	Payload string `koanf:"payload"`
	// Cron is a cron expression, Interval a fixed period: exactly one of
	// them.
	Cron     string        `koanf:"cron"`
	Interval time.Duration `koanf:"interval"`
	// TimeZone of Cron, an IANA name.
	TimeZone string `koanf:"time_zone"`
	// Jitter delays each task by up to this much, the same on every
	// replica.
	Jitter time.Duration `koanf:"jitter"`
	// MaxRetries of the tasks; nil (the key left out): the queue's, as
	// periodic.Schedule.MaxRetries.
	MaxRetries *int `koanf:"max_retries"`
	// Timeout of the tasks.
	Timeout time.Duration `koanf:"timeout"`
	// CatchUp is what to fire of the occurrences missed while no
	// scheduler ran; CatchUpWindow bounds all.
	CatchUp       string        `koanf:"catch_up"`
	CatchUpWindow time.Duration `koanf:"catch_up_window"`
	// Overlap is allow or skip (skip an occurrence while the previous
	// one's task is still stored).
	Overlap string `koanf:"overlap"`
}

// Schedule returns the schedule name declares.
func (p PeriodicConfig) Schedule(name string) periodic.Schedule {
	var payload []byte
	if p.Payload != "" {
		payload = []byte(p.Payload)
	}
	return periodic.Schedule{
		Name: name, Queue: p.Queue, Payload: payload, Cron: p.Cron, Interval: p.Interval, TimeZone: p.TimeZone,
		Jitter: p.Jitter, MaxRetries: p.MaxRetries, Timeout: p.Timeout,
		CatchUp: periodic.CatchUp(p.CatchUp), CatchUpWindow: p.CatchUpWindow, Overlap: periodic.Overlap(p.Overlap),
	}
}

// Schedules returns the configured schedules, compiled, in name order.
func (c *Config) Schedules() ([]*periodic.Compiled, error) {
	var out []*periodic.Compiled
	for _, name := range slices.Sorted(maps.Keys(c.Periodic)) {
		s, err := c.Periodic[name].Schedule(name).Compile()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func (v *validator) periodic(c *Config) {
	for _, name := range slices.Sorted(maps.Keys(c.Periodic)) {
		key := "periodic." + name
		p := c.Periodic[name]
		if p.MaxRetries != nil && *p.MaxRetries < 0 {
			v.add(key+".max_retries", "must be 0..1000 (got %d); leave it out for the queue's default", *p.MaxRetries)
			continue
		}
		if _, err := p.Schedule(name).Compile(); err != nil {
			var pe *periodic.Error
			if errors.As(err, &pe) {
				field := key + "." + pe.Field
				if pe.Field == "name" {
					field = key
				}
				v.add(field, "%s", pe.Reason)
			} else {
				v.add(key, "%v", err)
			}
			continue
		}
		if _, ok := c.Queues[p.Queue]; !ok {
			v.add(key+".queue", "unknown queue %q (not in queues)", p.Queue)
		}
	}
}
