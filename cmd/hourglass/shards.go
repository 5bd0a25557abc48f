package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/hourglass-sched/hourglass/inspect"
)

func (a *app) shardsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "shards",
		Short: "Each shard's owner and epoch (from etcd) and depths",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			in, ctx, done, err := a.session(cmd, true)
			if err != nil {
				return err
			}
			defer done()
			shards, err := in.Shards(ctx)
			if err != nil && shards == nil {
				return err
			}
			if err != nil { // depths read, owners not: say so and go on
				fmt.Fprintf(a.errOut, "hourglass: warning: owners unknown: %v\n", err)
			}
			return a.emit(shards, func(w io.Writer) { shardTable(w, shards) })
		},
	}
}

func shardTable(w io.Writer, shards []inspect.Shard) {
	row(w, "SHARD", "OWNER", "EPOCH", "REDIS EPOCH", "SCHEDULED", "READY", "IN FLIGHT", "DEAD")
	for _, s := range shards {
		owner := s.Owner
		if owner == "" {
			owner = "-"
		}
		row(w, s.Shard, owner, s.Epoch, s.StoredEpoch, s.Counts.Scheduled, s.Counts.Ready, s.Counts.InFlight, s.Counts.Dead)
	}
}
