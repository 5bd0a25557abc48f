package inspect

import (
	"context"

	"github.com/hourglass-sched/hourglass/internal/procs"
	"github.com/hourglass-sched/hourglass/internal/shard"
)

// Routing says which workers may take a queue's tasks, by the version and
// tags each worker carries (worker.Config.Version and Tags; the worker
// binary's worker.version and worker.tags): NotTags ["canary"] is "not
// canary", Versions ["1.4.2"] is "only version 1.4.2" (docs/operations.md,
// "Canary workers").
type Routing = shard.Routing

// Share gives a canary set of workers a share of a queue's tasks, taken
// by shard, a fraction of a shard as a fraction of time (Routing.Share;
// docs/operations.md, "A share for the canaries").
type Share = shard.Share

// SetRouting sets which workers may take queue name's tasks, cluster-wide
// and at run time: each worker re-reads it when the change is announced
// (within a second), stops popping the queue if the routing excludes it,
// and gives back, before its handler starts, a task it popped at that
// moment; tasks already running finish. A zero Routing admits every
// worker again (as ClearRouting). ErrNotFound for a queue not
// registered, ErrInvalidArgument for a malformed routing.
func (i *Inspector) SetRouting(ctx context.Context, name string, r Routing) error {
	if err := r.Validate(); err != nil {
		return ofKind(ErrInvalidArgument, err)
	}
	if err := i.mustExist(ctx, name); err != nil {
		return err
	}
	_, err := i.store.SetRouting(ctx, name, &r)
	return mapErr(err)
}

// ClearRouting lets every worker take queue name's tasks again.
// Idempotent, for any valid name (a removed queue's routing can be
// cleared).
func (i *Inspector) ClearRouting(ctx context.Context, name string) error {
	_, err := i.store.SetRouting(ctx, name, nil)
	return mapErr(err)
}

// Eligible returns, for each queue some live worker serves, how many live
// workers serve it and its routing admits (a worker from before routing,
// which ignores it, counts as admitted); a queue missing from the map,
// or mapped to 0, has no worker that may take its tasks ("no eligible worker" in hourglass queue ls and the dashboard).
// It reads the process registry (Processes: CLIENT LIST of every
// primary) and the routings.
func (i *Inspector) Eligible(ctx context.Context) (map[string]int, error) {
	ps, err := procs.List(ctx, i.rdb, i.Namespace(), 0)
	if err != nil {
		return nil, mapErr(err)
	}
	c, err := i.store.Controls(ctx)
	if err != nil {
		return nil, mapErr(err)
	}
	return eligible(ps, c), nil
}

// eligible counts, by queue, the workers of ps that serve it and that its
// routing in c admits (none when its routing cannot be read: the workers
// then take none of its tasks).
func eligible(ps []procs.Process, c shard.Controls) map[string]int {
	out := map[string]int{}
	for _, p := range ps {
		if p.Role != procs.RoleWorker {
			continue
		}
		for q := range p.Queues {
			r, set := c.Routes[q]
			_, bad := c.BadRoutes[q]
			n := out[q]
			// A worker that does not apply routing (older than it) takes
			// the queue's tasks whatever it says.
			if !p.Routes || !bad && (!set || r.Admits(p.Version, p.Tags)) {
				n++
			}
			out[q] = n
		}
	}
	return out
}

// canaries counts the workers of ps that serve queue, its routing in c
// admits, and its share's canary set holds (0 without a share).
func canaries(ps []procs.Process, c shard.Controls, queue string) int {
	r, set := c.Routes[queue]
	if !set || r.Share == nil {
		return 0
	}
	n := 0
	for _, p := range ps {
		if _, serves := p.Queues[queue]; serves && p.Role == procs.RoleWorker && p.Routes && r.Admits(p.Version, p.Tags) && r.Share.Has(p.Version, p.Tags) {
			n++
		}
	}
	return n
}
