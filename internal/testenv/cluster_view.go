package testenv

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/hourglass-sched/hourglass/internal/keyslot"
)

// infoFields parses the key:value lines of an INFO or CLUSTER INFO reply.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// clusterView is one node's CLUSTER NODES reply, parsed.
type clusterView struct {
	byID  map[string]clusterEntry
	owner [ClusterSlots]string // node ID serving each slot
	// pending reports a slot in importing or migrating state on the node
	// that answered.
	pending bool
	// signature is the topology in a canonical form, to compare the views
	// of two nodes: IDs, addresses, roles and slots, without the
	// answering node's own flags and link state.
	signature string
}

type clusterEntry struct {
	addr    string
	primary bool
	master  string // primary's ID, for a replica
}

func (c *RedisCluster) view(ctx context.Context, n *ClusterNode) (*clusterView, error) {
	s, err := c.client(n).ClusterNodes(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr, err)
	}
	v, err := parseClusterNodes(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", n.Addr, err)
	}
	return v, nil
}

// parseClusterNodes parses a CLUSTER NODES reply: one line per node,
// "<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent>
// <pong-recv> <config-epoch> <link-state> <slot>...".
func parseClusterNodes(s string) (*clusterView, error) {
	v := &clusterView{byID: map[string]clusterEntry{}}
	var sig []string
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("testenv: bad CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		e := clusterEntry{addr: addr, primary: slices.Contains(flags, "master")}
		if !e.primary && f[3] != "-" {
			e.master = f[3]
		}
		v.byID[f[0]] = e
		var ranges []string
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				v.pending = true
				continue
			}
			lo, hi, isRange := strings.Cut(r, "-")
			a, err := strconv.Atoi(lo)
			if err != nil {
				return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
			}
			b := a
			if isRange {
				if b, err = strconv.Atoi(hi); err != nil {
					return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
				}
			}
			if a < 0 || b >= ClusterSlots || a > b {
				return nil, fmt.Errorf("testenv: bad slot %q in CLUSTER NODES", r)
			}
			for i := a; i <= b; i++ {
				v.owner[i] = f[0]
			}
			ranges = append(ranges, r)
		}
		sig = append(sig, fmt.Sprintf("%s %s primary=%t master=%s slots=%s", f[0], addr, e.primary, e.master, strings.Join(ranges, ",")))
	}
	sort.Strings(sig)
	v.signature = strings.Join(sig, "\n")
	return v, nil
}

// KeySlot returns the hash slot of key: CRC16 (XMODEM) of the key, or of
// its hash tag (the part between the first '{' and the next '}', when not
// empty), modulo 16384.
func KeySlot(key string) int { return keyslot.Of(key) }
