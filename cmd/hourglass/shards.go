package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/connect"
)

func (a *app) shardsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shards",
		Short: "The layout, and each shard's owner and epoch (from etcd) and depths",
		Long: `The layout (generation, shard count, state, and the progress of a change
of the count) above each shard's owner and epoch (from etcd), the epoch
its scripts last saw in Redis, and its counts. While the count changes,
the shards being left and the new ones are listed. etcd is only used
here: when it cannot be reached within etcd.dial_timeout (or --timeout,
if shorter) the depths are printed with the owners unknown, and a
warning goes to stderr. -o json prints the shards only (shards layout
prints the layout).`,
		Args: noVerb,
		RunE: func(cmd *cobra.Command, _ []string) error {
			etcd, warn := a.etcdClient(cmd.Context())
			if warn != nil {
				fmt.Fprintf(a.errOut, "hourglass: warning: owners unknown: %s\n", errText(warn))
			}
			in, err := a.newInspector(etcd) // without etcd when it is nil
			if err != nil {
				return err
			}
			ctx, done := context.WithTimeout(cmd.Context(), a.timeout)
			defer done()
			var st inspect.LayoutStatus
			if a.output != "json" {
				if st, err = in.Layout(ctx); err != nil && !errors.Is(err, inspect.ErrPartial) {
					return err
				}
			}
			shards, err := in.Shards(ctx)
			if err != nil && shards == nil {
				return err
			}
			if err != nil && !errors.Is(err, inspect.ErrPartial) { // depths read, owners not: say so and go on
				fmt.Fprintf(a.errOut, "hourglass: warning: owners unknown: %s\n", errText(err))
				err = nil
			}
			return a.emitPartial(shards, func(w io.Writer) {
				fmt.Fprintf(w, "layout: %s\n\n", layoutLine(st))
				shardTable(w, shards)
			}, err)
		},
	}
	cmd.AddCommand(a.shardsLayout(), a.shardsResize())
	return cmd
}

// noVerb refuses arguments of a command that has verbs but also runs on
// its own: the first one is an unknown verb.
func noVerb(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
	}
	return nil
}

// etcdClient returns an etcd client for shard owners, or nil and why not
// when etcd cannot be reached within min(--timeout, etcd.dial_timeout):
// an unreachable etcd would otherwise hold the owners' read for the
// whole --timeout. A config error comes back as nil, nil, for the
// caller's newInspector to report.
func (a *app) etcdClient(ctx context.Context) (*clientv3.Client, error) {
	cfg, err := a.load()
	if err != nil {
		return nil, nil
	}
	etcd, err := connect.Etcd(cfg.Etcd)
	if err != nil {
		return nil, err
	}
	a.closer = append(a.closer, func() { _ = etcd.Close() })
	ctx, done := context.WithTimeout(ctx, min(a.timeout, cfg.Etcd.DialTimeout))
	defer done()
	if err := probeEtcd(ctx, etcd, cfg.ForElection("hourglass-cli").Prefix); err != nil {
		return nil, err
	}
	return etcd, nil
}

// probeEtcd reads the count of the election's keys: the smallest read
// that needs what reading the owners needs (a connection, and read
// access to prefix).
func probeEtcd(ctx context.Context, etcd *clientv3.Client, prefix string) error {
	start := time.Now()
	if _, err := etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd %v not reachable after %s: %w", etcd.Endpoints(), time.Since(start).Round(time.Millisecond), err)
	}
	return nil
}

func shardTable(w io.Writer, shards []inspect.Shard) {
	row(w, "SHARD", "OWNER", "EPOCH", "REDIS EPOCH", "SCHEDULED", "READY", "IN FLIGHT", "DEAD", "SLOT", "NODE")
	for _, s := range shards {
		if s.Problem != "" {
			row(w, s.Shard, orDash(s.Owner), s.Epoch, "?", "?", "?", "?", "?", s.Slot, orDash(s.Node))
			continue
		}
		row(w, s.Shard, orDash(s.Owner), s.Epoch, s.StoredEpoch, s.Counts.Scheduled, s.Counts.Ready, s.Counts.InFlight, s.Counts.Dead, s.Slot, orDash(s.Node))
	}
}

// orDash returns s, or "-" for "".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
