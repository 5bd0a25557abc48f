package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// MigrateSlot moves slot, keys included, from the primary that serves it
// to the primary to, following the documented procedure: CLUSTER SETSLOT
// IMPORTING on the target, MIGRATING on the source, MIGRATE of the keys in
// batches, then CLUSTER SETSLOT NODE on the target, the source and every
// other primary. Clients keep working meanwhile (ASK and MOVED
// redirections). It returns once every running node agrees that to serves
// the slot. It may be called from any goroutine.
func (c *RedisCluster) MigrateSlot(ctx context.Context, slot int, to *ClusterNode) error {
	if slot < 0 || slot >= ClusterSlots {
		return fmt.Errorf("testenv: slot %d out of range", slot)
	}
	var from *ClusterNode
	var view *clusterView
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		v, err := c.view(ctx, n)
		if err != nil {
			continue
		}
		view = v
		break
	}
	if view == nil {
		return errors.New("testenv: migrate: no node answers CLUSTER NODES")
	}
	for _, n := range c.Nodes {
		if n.ID == view.owner[slot] {
			from = n
		}
	}
	if from == nil {
		return fmt.Errorf("testenv: migrate: slot %d has no owner", slot)
	}
	if e, ok := view.byID[to.ID]; !ok || !e.primary {
		return fmt.Errorf("testenv: migrate: target %s is not a primary", to.Addr)
	}
	if from == to {
		return nil
	}
	src, dst := c.client(from), c.client(to)
	if err := dst.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID).Err(); err != nil {
		return fmt.Errorf("testenv: migrate: SETSLOT IMPORTING on %s: %w", to.Addr, err)
	}
	if err := src.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID).Err(); err != nil {
		return fmt.Errorf("testenv: migrate: SETSLOT MIGRATING on %s: %w", from.Addr, err)
	}
	for {
		keys, err := src.ClusterGetKeysInSlot(ctx, slot, migrateBatch).Result()
		if err != nil {
			return fmt.Errorf("testenv: migrate: GETKEYSINSLOT on %s: %w", from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		// No REPLACE (as redis-cli without --cluster-replace): a key
		// that a script created on the target while the slot moved
		// fails the migration (BUSYKEY) instead of being overwritten.
		if err := c.Migrate(ctx, from, to, false, keys...); err != nil {
			return fmt.Errorf("testenv: migrate: %w", err)
		}
	}
	// Target first, then source, then everyone else (CLUSTER SETSLOT docs).
	order := []*ClusterNode{to, from}
	for _, n := range c.Nodes {
		if n != to && n != from && view.byID[n.ID].primary && n.up() {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if err := c.client(n).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.ID).Err(); err != nil {
			return fmt.Errorf("testenv: migrate: SETSLOT NODE on %s: %w", n.Addr, err)
		}
	}
	return c.waitFor(ctx, fmt.Sprintf("all nodes to agree that %s serves slot %d", to.Addr, slot), func(v *clusterView) error {
		if v.owner[slot] != to.ID {
			return fmt.Errorf("slot %d served by %s", slot, v.owner[slot])
		}
		if v.pending {
			return errors.New("a slot is still importing or migrating")
		}
		return nil
	})
}

// Failover promotes replica to primary with CLUSTER FAILOVER, a
// coordinated failover that loses no acknowledged write (its primary must
// be reachable), and waits until every running node agrees and the cluster
// is ok again. It may be called from any goroutine.
func (c *RedisCluster) Failover(ctx context.Context, replica *ClusterNode) error {
	if err := c.client(replica).Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return fmt.Errorf("testenv: CLUSTER FAILOVER on %s: %w", replica.Addr, err)
	}
	if err := c.waitFor(ctx, replica.Addr+" to be primary", func(v *clusterView) error {
		if e, ok := v.byID[replica.ID]; !ok || !e.primary {
			return fmt.Errorf("%s is not a primary yet", replica.Addr)
		}
		return nil
	}); err != nil {
		return err
	}
	return c.WaitConsistent(ctx)
}

// WaitConsistent waits until every running node reports cluster_state:ok
// with all slots covered and knows every node, all of them agree on roles
// and slot ownership, no slot is being migrated, and every replica's link
// to its primary is up. Nodes that are not running (killed or paused) are
// ignored. It waits until ctx ends, at most 30 s, and may be called from
// any goroutine.
func (c *RedisCluster) WaitConsistent(ctx context.Context) error {
	return c.waitFor(ctx, "a consistent cluster", func(*clusterView) error { return nil })
}

// waitFor polls every running node until they report a healthy cluster,
// agree on its topology, and extra accepts that topology, or until ctx ends
// (or clusterReadyTimeout passes).
func (c *RedisCluster) waitFor(ctx context.Context, what string, extra func(*clusterView) error) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.check(ctx, extra)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

func (c *RedisCluster) check(ctx context.Context, extra func(*clusterView) error) error {
	var first *clusterView
	var firstAddr string
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		cl := c.client(n)
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr, err)
		}
		fields := infoFields(info)
		if fields["cluster_state"] != "ok" || fields["cluster_slots_ok"] != strconv.Itoa(ClusterSlots) {
			return fmt.Errorf("%s: cluster_state:%s cluster_slots_ok:%s", n.Addr, fields["cluster_state"], fields["cluster_slots_ok"])
		}
		if fields["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) {
			return fmt.Errorf("%s: knows %s of %d nodes", n.Addr, fields["cluster_known_nodes"], len(c.Nodes))
		}
		v, err := c.view(ctx, n)
		if err != nil {
			return err
		}
		if first == nil {
			first, firstAddr = v, n.Addr
		} else if v.signature != first.signature {
			return fmt.Errorf("%s and %s disagree:\n%s\n---\n%s", firstAddr, n.Addr, first.signature, v.signature)
		}
		if v.pending {
			return fmt.Errorf("%s: a slot is importing or migrating", n.Addr)
		}
		if err := extra(v); err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		if !v.byID[n.ID].primary {
			repl, err := cl.Info(ctx, "replication").Result()
			if err != nil {
				return fmt.Errorf("%s: INFO: %w", n.Addr, err)
			}
			if s := infoFields(repl)["master_link_status"]; s != "up" {
				return fmt.Errorf("%s: master_link_status:%s", n.Addr, s)
			}
		}
	}
	if first == nil {
		return errors.New("no node is running")
	}
	return nil
}

// WaitSlotOwner returns once every running node says that to serves
// slot, for a test that moved the slot itself with CLUSTER SETSLOT: until
// then a cluster client may be sent back and forth by MOVED between a
// node that took the change and one that did not. Unlike WaitConsistent
// it does not wait for other slots' migrations to end, so tests that
// migrate different slots in parallel do not wait for each other.
func (c *RedisCluster) WaitSlotOwner(ctx context.Context, slot int, to *ClusterNode) error {
	ctx, cancel := context.WithTimeout(ctx, clusterReadyTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := c.slotOwnedBy(ctx, slot, to)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: waiting for every node to agree that %s serves slot %d: %w (last: %v)", to.Addr, slot, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// slotOwnedBy checks that every running node's view gives slot to to.
func (c *RedisCluster) slotOwnedBy(ctx context.Context, slot int, to *ClusterNode) error {
	for _, n := range c.Nodes {
		if !n.up() {
			continue
		}
		v, err := c.view(ctx, n)
		if err != nil {
			return err
		}
		if v.owner[slot] != to.ID {
			return fmt.Errorf("%s says slot %d is served by %s", n.Addr, slot, v.owner[slot])
		}
	}
	return nil
}

// Migrate moves keys from the node from to the node to with one MIGRATE,
// which without replace refuses a key the target has already (BUSYKEY).
// The cluster's MIGRATEs go one at a time: MIGRATE blocks its source
// until the target has answered, so two in opposite directions at once
// (parallel tests migrating slots between the same primaries) would each
// wait for the other until their timeout, and nodes blocked that long
// are marked failed.
func (c *RedisCluster) Migrate(ctx context.Context, from, to *ClusterNode, replace bool, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	host, port, err := net.SplitHostPort(to.Addr)
	if err != nil {
		return err
	}
	args := []any{"MIGRATE", host, port, "", 0, int(migrateTimeout / time.Millisecond)}
	if replace {
		args = append(args, "REPLACE")
	}
	args = append(args, "KEYS")
	for _, k := range keys {
		args = append(args, k)
	}
	c.migrating.Lock()
	defer c.migrating.Unlock()
	if err := c.client(from).Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("MIGRATE %d keys from %s to %s: %w", len(keys), from.Addr, to.Addr, err)
	}
	return nil
}
