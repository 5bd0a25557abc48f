package testenv

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/localrun"
)

// SentinelMasterName is the name under which StartSentinel's sentinels
// monitor the primary.
const SentinelMasterName = "hourglass"

// Sentinel timings, the runbook's (docs/topologies.md, "Sentinel
// timings"): down-after-milliseconds above the 5 s during which a
// Sentinel still counts the other Sentinels' down votes of the failover
// that just ended, so that the promoted primary is never failed over
// again on those votes (with 1000 ms it sometimes was, about 1 s after
// the switch). A killed primary is replaced in about 7 s.
const (
	sentinelDownAfter       = 6000 * time.Millisecond
	sentinelFailoverTimeout = 3000 * time.Millisecond
	sentinelReadyTimeout    = 30 * time.Second
)

// SentinelSetup is a primary, its replica and three sentinels that
// monitor them with a quorum of 2, started for one test on free loopback
// ports with their files in temporary directories and stopped at cleanup.
type SentinelSetup struct {
	// MasterName is the name the sentinels monitor the primary under.
	MasterName string
	// SentinelAddrs are the sentinels' host:port addresses.
	SentinelAddrs []string
	// Sentinels are the sentinel processes, in SentinelAddrs order.
	Sentinels []*Sentinel
	// Primary is the server that was primary at start.
	Primary *Redis
	// Replica is the server that replicated Primary at start.
	Replica *Redis
	t       testing.TB

	mu       sync.Mutex
	clients  map[string]*redis.Client         // by address, for the helpers' own use
	sclients map[string]*redis.SentinelClient // likewise, for sentinels
}

// Sentinel is one redis-sentinel process.
type Sentinel struct {
	*Process
	// Addr is host:port of the sentinel.
	Addr string
	// Conf is the sentinel's configuration file, which it rewrites as it
	// learns about the deployment.
	Conf string
}

// StartSentinel starts a primary, a replica of it (--replicaof) and
// three sentinels (redis-sentinel, in parallel), each with its
// own generated sentinel.conf that monitors the primary with quorum 2,
// down-after-milliseconds 6000 and failover-timeout 3000. It waits until
// the replica's link is up and every sentinel sees the primary as up, the
// replica with a working link, and the two other sentinels.
func StartSentinel(t testing.TB) *SentinelSetup {
	t.Helper()
	bin := LookBinary(t, "redis-sentinel") // Debian's redis-sentinel package; it is redis-server in sentinel mode
	noDelay := WithRedisArgs("--repl-diskless-sync-delay", "0")
	primary := StartRedis(t, noDelay)
	_, pport, _ := net.SplitHostPort(primary.Addr)
	replica := StartRedis(t, noDelay, WithRedisArgs("--replicaof", "127.0.0.1", pport))
	s := &SentinelSetup{MasterName: SentinelMasterName, Primary: primary, Replica: replica, t: t,
		clients: map[string]*redis.Client{}, sclients: map[string]*redis.SentinelClient{}}
	t.Cleanup(s.closeClients)

	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	rc := s.client(replica.Addr)
	WaitFor(t, sentinelReadyTimeout, "the replica's link to the primary", func() (bool, string) {
		info, err := rc.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		st := infoFields(info)["master_link_status"]
		return st == "up", "master_link_status:" + st
	})

	const n = 3
	dirs := make([]string, n)
	for i := range dirs {
		dirs[i] = t.TempDir()
	}
	procs := make([]*localrun.Proc, n)
	addrs := make([]string, n)
	confs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { procs[i], addrs[i], confs[i], errs[i] = startSentinel(dirs[i], bin, pport) })
	}
	wg.Wait()
	for i, p := range procs {
		if p != nil {
			s.Sentinels = append(s.Sentinels, &Sentinel{Process: watch(t, p), Addr: addrs[i], Conf: confs[i]})
			s.SentinelAddrs = append(s.SentinelAddrs, addrs[i])
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("testenv: start sentinels: %v", err)
	}

	WaitFor(t, sentinelReadyTimeout, "the sentinels to know the primary, the replica and each other", func() (bool, string) {
		for _, sn := range s.Sentinels {
			if err := s.knowsAll(ctx, sn); err != nil {
				return false, fmt.Sprintf("sentinel %s: %v", sn.Addr, err)
			}
		}
		return true, ""
	})
	return s
}

// startSentinel writes a sentinel.conf into dir and starts a sentinel on
// a free port, retrying on another port if the chosen one was taken.
func startSentinel(dir, bin, primaryPort string) (p *localrun.Proc, addr, conf string, err error) {
	conf = filepath.Join(dir, "sentinel.conf")
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = localrun.FreePort(); err != nil {
			return nil, "", "", err
		}
		addr = fmt.Sprintf("127.0.0.1:%d", port)
		text := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"dir " + strconv.Quote(dir),
			"daemonize no",
			`logfile ""`,
			"sentinel resolve-hostnames no",
			"sentinel announce-hostnames no",
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s 2", SentinelMasterName, primaryPort),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMasterName, sentinelDownAfter/time.Millisecond),
			fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMasterName, sentinelFailoverTimeout/time.Millisecond),
			fmt.Sprintf("sentinel parallel-syncs %s 1", SentinelMasterName),
		}, "\n") + "\n"
		// The sentinel rewrites its configuration, so it must be writable.
		if err = os.WriteFile(conf, []byte(text), 0o644); err != nil {
			return nil, "", "", err
		}
		p, err = localrun.Start(fmt.Sprintf("sentinel-%d", port), bin, []string{conf}, nil,
			filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", port)))
		if err != nil {
			return nil, "", "", err
		}
		if err = p.WaitReady(sentinelReadyTimeout, func() error { return pingRedis(addr) }); err == nil {
			return p, addr, conf, nil
		}
		p.Stop(time.Second)
	}
	return nil, "", "", err
}

// pingRedis reports whether a server or sentinel answers PING at addr.
func pingRedis(addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	return c.Ping(ctx).Err()
}

// knowsAll reports whether sn sees the primary up, the replica with a
// working link, and every other sentinel connected.
func (s *SentinelSetup) knowsAll(ctx context.Context, sn *Sentinel) error {
	sc := s.sentinelClient(sn.Addr)
	m, err := sc.Master(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL MASTER: %w", err)
	}
	if addr := net.JoinHostPort(m["ip"], m["port"]); addr != s.Primary.Addr || m["flags"] != "master" {
		return fmt.Errorf("primary %s flags %q, want %s up", addr, m["flags"], s.Primary.Addr)
	}
	reps, err := sc.Replicas(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL REPLICAS: %w", err)
	}
	if len(reps) != 1 {
		return fmt.Errorf("knows %d replicas, want 1", len(reps))
	}
	r := reps[0]
	if addr := net.JoinHostPort(r["ip"], r["port"]); addr != s.Replica.Addr || r["flags"] != "slave" || r["master-link-status"] != "ok" {
		return fmt.Errorf("replica %s flags %q master-link-status %q, want %s up and linked", addr, r["flags"], r["master-link-status"], s.Replica.Addr)
	}
	others, err := sc.Sentinels(ctx, s.MasterName).Result()
	if err != nil {
		return fmt.Errorf("SENTINEL SENTINELS: %w", err)
	}
	want := map[string]bool{}
	for _, a := range s.SentinelAddrs {
		if a != sn.Addr {
			want[a] = true
		}
	}
	for _, o := range others {
		if a := net.JoinHostPort(o["ip"], o["port"]); want[a] && o["flags"] == "sentinel" {
			delete(want, a)
		}
	}
	if len(want) > 0 {
		return fmt.Errorf("does not see sentinels %v connected (knows %d)", sortedKeys(want), len(others))
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// Restart restarts a stopped sentinel with the same port and
// configuration (as it last rewrote it) and waits until it answers.
func (sn *Sentinel) Restart() {
	sn.t.Helper()
	sn.Process.Restart()
	if err := sn.WaitReady(sentinelReadyTimeout, func() error { return pingRedis(sn.Addr) }); err != nil {
		sn.t.Fatal(err)
	}
}

// RestartAsReplica restarts r, a server of the setup that was killed
// (the primary a failover replaced), as the runbook brings a failed node
// back: a replica of primary from its start, with replica-priority 0 so
// that no failover promotes it before it is in sync. Then WaitInSync and
// SetReplicaPriority.
func (s *SentinelSetup) RestartAsReplica(r *Redis, primary string) {
	s.t.Helper()
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		s.t.Fatal(err)
	}
	r.RestartWith("--replicaof", host, port, "--replica-priority", "0")
}

// WaitInSync waits until the replica at addr has its link to primary up,
// no sync in progress, and the replication offset primary had when the
// wait began.
func (s *SentinelSetup) WaitInSync(addr, primary string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	info, err := s.client(primary).Info(ctx, "replication").Result()
	if err != nil {
		s.t.Fatalf("testenv: INFO of the primary %s: %v", primary, err)
	}
	want, _ := strconv.ParseInt(infoFields(info)["master_repl_offset"], 10, 64)
	WaitFor(s.t, sentinelReadyTimeout, fmt.Sprintf("%s in sync with %s (offset %d)", addr, primary, want), func() (bool, string) {
		info, err := s.client(addr).Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		f := infoFields(info)
		got, _ := strconv.ParseInt(f["slave_repl_offset"], 10, 64)
		return f["master_link_status"] == "up" && f["master_sync_in_progress"] == "0" && got >= want,
			fmt.Sprintf("master_link_status:%s master_sync_in_progress:%s slave_repl_offset:%d", f["master_link_status"], f["master_sync_in_progress"], got)
	})
}

// SetReplicaPriority sets replica-priority on the server at addr and
// waits until every running sentinel reports it (WaitSentinelsSee).
func (s *SentinelSetup) SetReplicaPriority(addr string, priority int) {
	s.t.Helper()
	if err := s.client(addr).ConfigSet(context.Background(), "replica-priority", strconv.Itoa(priority)).Err(); err != nil {
		s.t.Fatalf("testenv: CONFIG SET replica-priority on %s: %v", addr, err)
	}
	s.WaitSentinelsSee(addr, priority)
}

// WaitSentinelsSee waits until every running sentinel lists the server
// at addr as a replica that answers, with replica-priority priority.
// Sentinels read a replica's INFO, and so its priority, every 10 s (and
// at once when they connect to it).
func (s *SentinelSetup) WaitSentinelsSee(addr string, priority int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	WaitFor(s.t, sentinelReadyTimeout, fmt.Sprintf("every sentinel to see %s with priority %d", addr, priority), func() (bool, string) {
		for _, sn := range s.Sentinels {
			if !sn.Running() || sn.Stopped() {
				continue
			}
			reps, err := s.sentinelClient(sn.Addr).Replicas(ctx, s.MasterName).Result()
			if err != nil {
				return false, fmt.Sprintf("sentinel %s: %v", sn.Addr, err)
			}
			i := slices.IndexFunc(reps, func(r map[string]string) bool { return net.JoinHostPort(r["ip"], r["port"]) == addr })
			if i < 0 || reps[i]["flags"] != "slave" || reps[i]["slave-priority"] != strconv.Itoa(priority) {
				return false, fmt.Sprintf("sentinel %s lists %v", sn.Addr, reps)
			}
		}
		return true, ""
	})
}

// Switches returns how many times a sentinel switched the primary (its
// log's +switch-master lines, the most any sentinel logged): one per
// failover that completed.
func (s *SentinelSetup) Switches() int {
	n := 0
	for _, sn := range s.Sentinels {
		b, err := os.ReadFile(sn.LogPath())
		if err != nil {
			s.t.Fatalf("testenv: %v", err)
		}
		n = max(n, strings.Count(string(b), "+switch-master"))
	}
	return n
}

// FailoverClient returns a go-redis client that finds the current primary
// through the sentinels and follows failovers, closed at cleanup.
func (s *SentinelSetup) FailoverClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.SentinelAddrs})
	t.Cleanup(func() { c.Close() })
	return c
}

// WaitForNewPrimary waits, until ctx ends, for the sentinels to agree on
// a primary other than old: every running sentinel (killed or paused ones
// are skipped) that answers reports the same address, at least a majority
// of all sentinels answer, and that server reports role master. It
// returns the new primary's address. It may be called from any goroutine.
func (s *SentinelSetup) WaitForNewPrimary(ctx context.Context, old string) (string, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		addr, err := s.agreedPrimary(ctx)
		if err == nil && addr == old {
			err = fmt.Errorf("sentinels still report %s", old)
		}
		if err == nil {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("testenv: waiting for a primary other than %s: %w (last: %v)", old, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// agreedPrimary returns the primary that all answering sentinels, at
// least a majority, report, once it reports role master.
func (s *SentinelSetup) agreedPrimary(ctx context.Context) (string, error) {
	var agreed string
	answered := 0
	for _, sn := range s.Sentinels {
		if !sn.Running() || sn.Stopped() { // killed or paused
			continue
		}
		hp, err := s.sentinelClient(sn.Addr).GetMasterAddrByName(ctx, s.MasterName).Result()
		if err != nil || len(hp) != 2 {
			continue
		}
		addr := net.JoinHostPort(hp[0], hp[1])
		if answered > 0 && addr != agreed {
			return "", fmt.Errorf("sentinels disagree: %s and %s", agreed, addr)
		}
		agreed = addr
		answered++
	}
	if answered <= len(s.Sentinels)/2 {
		return "", fmt.Errorf("only %d of %d sentinels answer", answered, len(s.Sentinels))
	}
	role, err := s.client(agreed).Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", fmt.Errorf("ROLE on %s: %w", agreed, err)
	}
	if len(role) == 0 || role[0] != "master" {
		return "", fmt.Errorf("%s reports role %v", agreed, role)
	}
	return agreed, nil
}

// client returns the helpers' plain client for addr, closed at cleanup.
func (s *SentinelSetup) client(addr string) *redis.Client {
	return cached(&s.mu, s.clients, addr, redis.NewClient)
}

// sentinelClient returns the helpers' client for the sentinel at addr,
// closed at cleanup.
func (s *SentinelSetup) sentinelClient(addr string) *redis.SentinelClient {
	return cached(&s.mu, s.sclients, addr, redis.NewSentinelClient)
}

// cached returns m's client for addr, made by mk with helperOptions on
// first use, under mu.
func cached[C any](mu *sync.Mutex, m map[string]C, addr string, mk func(*redis.Options) C) C {
	mu.Lock()
	defer mu.Unlock()
	c, ok := m[addr]
	if !ok {
		c = mk(helperOptions(addr))
		m[addr] = c
	}
	return c
}

// helperOptions are the options of the helpers' own clients: no retries
// and short timeouts, as they poll.
func helperOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second}
}

func (s *SentinelSetup) closeClients() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.clients {
		c.Close() // later helper calls fail with "client is closed"
	}
	for _, c := range s.sclients {
		c.Close()
	}
}
