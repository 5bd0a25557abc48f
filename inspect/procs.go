package inspect

import (
	"context"
	"time"

	"github.com/hourglass-sched/hourglass/internal/procs"
)

// Process is a live scheduler or worker of the deployment (Processes).
type Process struct {
	// ID is the scheduler's replica id or the worker's process id.
	ID string `json:"id"`
	// Role is "scheduler" or "worker".
	Role    string `json:"role"`
	Version string `json:"version"`
	// Tags are a worker's tags (worker.Config.Tags), which a queue's
	// Routing may admit or exclude.
	Tags    []string  `json:"tags,omitempty"`
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	// Queues are the queues it serves, for a worker each with its
	// handler slots (for a scheduler 0: the queues it registers).
	Queues map[string]int `json:"queues"`
	// Slots is a worker's handler slots in all; Busy how many ran a
	// handler when it last wrote (at most 5 s stale while it is busy).
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Updated is when it last wrote its entry.
	Updated time.Time `json:"updated"`
	// Named says every connection of the process carries its name (the
	// binaries'); an embedded worker whose client names none is listed
	// by its entry's age too.
	Named bool `json:"named"`
	// Conns is the number of its Redis connections; Quiet how long ago
	// the latest command on any of them was sent (whole seconds).
	Conns int           `json:"conns"`
	Quiet time.Duration `json:"quiet"`
}

// ProcessSilence is how long a process may send Redis nothing and still
// be listed by Processes: a killed process disappears at once (its
// connections close), a paused or cut-off one within this bound.
const ProcessSilence = procs.Silence

// Processes lists the deployment's live schedulers and workers, schedulers
// first, each in id order (docs/operations.md, "Processes"). A process is
// live while its entry is in the registry and one of its connections
// sent a command within ProcessSilence, or, for a process whose
// connections are not all named (Named false), while its entry is
// younger than that. It reads CLIENT LIST of every primary (the ACL
// user's "client|list") and writes nothing.
func (i *Inspector) Processes(ctx context.Context) ([]Process, error) {
	ps, err := procs.List(ctx, i.rdb, i.Namespace(), 0)
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]Process, len(ps))
	for k, p := range ps {
		out[k] = Process{ID: p.ID, Role: p.Role, Version: p.Version, Tags: p.Tags, Host: p.Host, PID: p.PID, Started: p.Started,
			Queues: p.Queues, Slots: p.Slots, Busy: p.Busy, Updated: p.Updated, Named: p.Named, Conns: p.Conns, Quiet: p.Quiet}
	}
	return out, nil
}
