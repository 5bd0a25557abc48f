package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hourglass-sched/hourglass/internal/dashboard"
)

// Status is the body of GET /v1/status.
type Status struct {
	Replica string        `json:"replica"`
	Ready   bool          `json:"ready"`
	Members []string      `json:"members"`
	Shards  []ShardStatus `json:"shards"`
}

// FetchStatus reads GET /v1/status of the replica whose HTTP endpoint
// listens on addr (host:port).
func FetchStatus(ctx context.Context, addr string) (Status, error) {
	var st Status
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("scheduler: status of %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("scheduler: status of %s: %s", addr, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("scheduler: status of %s: %w", addr, err)
	}
	return st, nil
}

// ShardStatus is one owned shard in Status.
type ShardStatus struct {
	Shard int   `json:"shard"`
	Epoch int64 `json:"epoch"`
}

// Handler returns the replica's HTTP handler.
func (s *Scheduler) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	if d := s.cfg.HTTP.Dashboard; d.Enabled {
		ui := dashboard.New(dashboard.Options{Inspector: s.inspector, Gatherer: s.reg, ReadOnly: d.ReadOnly,
			Username: d.Username, Password: d.Password, AllowedHosts: d.AllowedHosts, Log: s.log.Named("dashboard"),
			Schedules: s.firedSchedules})
		mux.Handle("/ui/", ui)
		mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if st := s.starting.Load(); st != nil {
			msg := "not ready: starting: registering queues"
			if st.err != nil {
				msg += " failed (retrying): " + st.err.Error()
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if !s.election.Ready() {
			http.Error(w, "not ready: no valid etcd lease", http.StatusServiceUnavailable)
			return
		}
		if err := s.redisReady(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.Status())
	})
	return mux
}

// Status returns the replica's current view.
func (s *Scheduler) Status() Status {
	st := Status{Replica: s.replica, Ready: s.election.Ready(), Members: s.election.Members(), Shards: []ShardStatus{}}
	for sh, e := range s.election.Owned() {
		st.Shards = append(st.Shards, ShardStatus{Shard: sh, Epoch: e})
	}
	sort.Slice(st.Shards, func(i, j int) bool { return st.Shards[i].Shard < st.Shards[j].Shard })
	return st
}

// redisReady checks the Redis nodes this replica works on: those that
// hold its shards (on a Redis Cluster, each primary serving one of their
// slots; shard.Store.PingShards), so that a dead primary of an owned
// shard turns /readyz 503 naming it, and another node's failure does
// not. A replica that owns no shard needs Redis to answer at all.
func (s *Scheduler) redisReady(ctx context.Context) error {
	owned := s.Owned()
	if len(owned) == 0 {
		if err := s.rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
		return nil
	}
	slices.Sort(owned)
	return s.store.PingShards(ctx, owned)
}

// Owned returns the shards this replica owns now, in no order.
func (s *Scheduler) Owned() []int {
	owned := s.election.Owned()
	out := make([]int, 0, len(owned))
	for sh := range owned {
		out = append(out, sh)
	}
	return out
}
