// Command bench measures Hourglass's performance bars (BRIEF §5) side by
// side with hibiken/asynq on the same machine and Redis build. It starts
// its own redis-server (two: one per system) and etcd on loopback in a
// temporary directory, builds and runs the scheduler binary, and removes
// everything when it ends. See README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/hourglass-sched/hourglass/internal/scan"
)

var allScenarios = []string{"burst", "steady", "capacity", "enqueue", "idle", "cost", "deadletter", "cancel", "results", "noisy", "keys", "failover", "durable", "cluster", "periodic", "reshard"}

func main() {
	os.Exit(run())
}

func run() int {
	scen := flag.String("scenarios", "all", "comma-separated scenarios: "+strings.Join(allScenarios, ",")+", or all")
	quick := flag.Bool("quick", false, "short smoke run (smaller sizes and windows)")
	out := flag.String("out", "results", "directory for latest.json and latest.md (quick runs write quick.json/.md)")
	cpuprof := flag.String("cpuprofile", "", "write a CPU profile of the bench process (producers, in-process workers, asynq) to this file")
	noAsynq := flag.Bool("no-asynq", false, "skip asynq")
	noBullMQ := flag.Bool("no-bullmq", false, "skip BullMQ (which needs Node.js 20 or newer and npm)")
	tuned := flag.Duration("tuned-prefetch", 100*time.Millisecond, "also run the steady scenario for Hourglass with this scheduler.prefetch, in an environment of its own, as a tuned row beside the default (bars read the default rows); 0 skips it")
	sizedShards := flag.Int("steady-shards", 2, "also run the steady scenario for Hourglass with this many shards (a deployment sized to its load: one shard per scheduler); 0 skips it")
	render := flag.String("render", "", "print the markdown report of a results .json file (e.g. results/latest.json) and exit")
	flag.Parse()
	if *render != "" {
		return renderFile(*render)
	}
	if *sizedShards == 1 || *sizedShards < 0 {
		fmt.Fprintln(os.Stderr, "bench: -steady-shards must be 0 (skip) or at least 2, one shard per scheduler")
		return 2
	}

	want := map[string]bool{}
	if *scen == "all" {
		for _, s := range allScenarios {
			want[s] = true
		}
	} else {
		for _, s := range strings.Split(*scen, ",") {
			s = strings.TrimSpace(s)
			ok := false
			for _, a := range allScenarios {
				ok = ok || a == s
			}
			if !ok {
				fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (have %s)\n", s, strings.Join(allScenarios, ","))
				return 2
			}
			want[s] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	logf := func(f string, a ...any) {
		fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(f, a...))
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		_ = pprof.StartCPUProfile(f)
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	var bqDir string
	if !*noBullMQ {
		root, err := repoRoot()
		if err == nil {
			bqDir, err = setupBullMQ(ctx, root, logf)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	e, err := startEnv(ctx, logf, envOpts{shards: nShards, asynq: !*noAsynq, bullmq: !*noBullMQ})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer func() {
		logf("stopping schedulers, etcd and Redis")
		e.stop()
	}()
	o := sizesFor(*quick)
	rep := &report{Meta: meta{
		Date: time.Now().UTC().Format(time.RFC3339), Commit: gitCommit(e.root), Go: runtime.Version(),
		Redis: redisVersion(ctx, e.hgAdmin), Etcd: etcdVersion(), CPUs: runtime.NumCPU(), CPUModel: cpuModel(),
		Quick: *quick, Asynq: asynqVersion(), Prefetch: tuned.String(), DefaultPrefetch: scan.DefaultPrefetch.String(),
	}}
	for _, s := range allScenarios {
		if want[s] {
			rep.Meta.Scenarios = append(rep.Meta.Scenarios, s)
		}
	}
	logf("Redis %s and etcd on loopback, 2 schedulers, %d shards, default configuration; scenarios %s", rep.Meta.Redis, nShards, strings.Join(rep.Meta.Scenarios, ","))

	hg, err := newHG(e)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer hg.close()
	if err := hg.warmUp(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench: warm-up:", err)
		return 1
	}
	systems := []system{hg}
	var peers []system
	if !*noAsynq {
		def, tuned := asynqConfigs()
		a1, a2 := newAQ(e, "asynq", def), newAQ(e, "asynq-tuned", tuned)
		defer a1.close()
		defer a2.close()
		peers = []system{a1, a2}
	}
	if !*noBullMQ {
		bq, err := newBQ(e, bqDir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: bullmq:", err)
			return 1
		}
		defer bq.close()
		rep.Meta.BullMQ = bq.version
		peers = append(peers, bq)
	}
	systems = append(systems, peers...)
	step := func(name string, f func()) {
		if !want[name] || ctx.Err() != nil {
			return
		}
		logf("--- %s", name)
		before, n := loadAvg(), len(rep.Scenarios)
		f()
		for _, s := range rep.Scenarios[n:] {
			s.Notes = append(s.Notes, fmt.Sprintf("machine load average (1/5/15 min) before: %s, after: %s — the machine has %d CPUs; other work on it skews the figures", before, loadAvg(), runtime.NumCPU()))
		}
	}
	step("burst", func() { rep.Scenarios = append(rep.Scenarios, runBurst(ctx, o, systems, logf)) })
	step("steady", func() {
		sc := runSteady(ctx, o, systems, logf)
		rep.Scenarios = append(rep.Scenarios, sc)
		if *sizedShards > 0 && *sizedShards != nShards {
			logf("steady again with %d shards: own Redis, etcd and schedulers", *sizedShards)
			if err := inEnv(ctx, logf, envOpts{shards: *sizedShards}, func(hg *hgSystem) {
				sc.Rows = append(sc.Rows, runSteady(ctx, o, []system{hg}, logf).Rows...)
			}); err != nil {
				sc.Notes = append(sc.Notes, fmt.Sprintf("%d-shard run: %v", *sizedShards, err))
			}
		}
		if *tuned > 0 {
			logf("steady again with scheduler.prefetch %s (tuned): own Redis, etcd and schedulers", *tuned)
			if err := inEnv(ctx, logf, envOpts{shards: nShards, prefetch: *tuned}, func(hg *hgSystem) {
				sc.Rows = append(sc.Rows, runSteady(ctx, o, []system{hg}, logf).Rows...)
			}); err != nil {
				sc.Notes = append(sc.Notes, fmt.Sprintf("tuned run: %v", err))
			}
			sc.Notes = append(sc.Notes, fmt.Sprintf("the tuned row runs scheduler.prefetch %s (movers move tasks that long before they are due, workers hold each until due; flag -tuned-prefetch): reported beside the default, never read by the bars", *tuned))
		}
	})
	step("capacity", func() {
		sc := capacityScenario(o)
		rep.Scenarios = append(rep.Scenarios, sc)
		runCapacity(ctx, o, sc, systems, logf)
		if *sizedShards > 0 && *sizedShards != nShards {
			logf("capacity again with %d shards: own Redis, etcd and schedulers", *sizedShards)
			if err := inEnv(ctx, logf, envOpts{shards: *sizedShards}, func(hg *hgSystem) {
				runCapacity(ctx, o, sc, []system{hg}, logf)
			}); err != nil {
				sc.Notes = append(sc.Notes, fmt.Sprintf("%d-shard run: %v", *sizedShards, err))
			}
		}
	})
	step("enqueue", func() { rep.Scenarios = append(rep.Scenarios, runEnqueue(ctx, o, systems, logf)) })
	step("idle", func() { rep.Scenarios = append(rep.Scenarios, runIdle(ctx, o, hg, peers, logf)) })
	step("cost", func() {
		st, sat := runCost(ctx, o, hg, systems, logf)
		rep.Scenarios = append(rep.Scenarios, st, sat)
	})
	step("deadletter", func() { rep.Scenarios = append(rep.Scenarios, runDeadLetter(ctx, o, hg, logf)) })
	step("cancel", func() { rep.Scenarios = append(rep.Scenarios, runCancel(ctx, hg, min(200, concurrency), logf)) })
	step("results", func() {
		rep.Scenarios = append(rep.Scenarios, runResults(ctx, hg, o.resultsN, 200, o.resultsRetention, logf))
	})
	step("noisy", func() { rep.Scenarios = append(rep.Scenarios, runNoisy(ctx, hg, o.noisyBig, o.noisyQuiet, logf)) })
	step("keys", func() { rep.Scenarios = append(rep.Scenarios, runKeys(ctx, hg, o.keysN, logf)) })
	step("failover", func() { rep.Scenarios = append(rep.Scenarios, runFailover(ctx, o, hg, logf)) })
	step("durable", func() { rep.Scenarios = append(rep.Scenarios, runDurable(ctx, o, e, logf)) })
	step("cluster", func() { rep.Scenarios = append(rep.Scenarios, runCluster(ctx, o, logf)) })
	step("periodic", func() { rep.Scenarios = append(rep.Scenarios, runPeriodic(ctx, o, logf)) })
	step("reshard", func() { rep.Scenarios = append(rep.Scenarios, runReshard(ctx, logf)) })
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "bench: interrupted; no results written")
		return 1
	}
	rep.Meta.Seconds = time.Since(start).Seconds()
	compareStandalone(rep)
	rep.Bars = bars(rep, e.ttl, o)
	rep.text(os.Stdout)
	base := "latest"
	if *quick {
		base = "quick"
	}
	if err := rep.write(*out, base); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	abs, _ := filepath.Abs(*out)
	logf("wrote %s/%s.json and %s.md", abs, base, base)
	return 0
}

// loadAvg returns the 1, 5 and 15 minute load averages.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func gitCommit(root string) string {
	cmd := exec.Command("git", "rev-parse", "--short", "HEAD")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(b))
	st := exec.Command("git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench", ":!Makefile")
	st.Dir = root
	if b, err := st.Output(); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		c += "+dirty"
	}
	return c
}

func etcdVersion() string {
	b, err := exec.Command("etcd", "--version").Output()
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func asynqVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/hibiken/asynq" {
				return d.Version
			}
		}
	}
	return "?"
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "?"
}

// renderFile prints the markdown of a results file written by an earlier
// run.
func renderFile(path string) int {
	b, err := os.ReadFile(path)
	if err == nil {
		var r report
		if err = json.Unmarshal(b, &r); err == nil {
			r.markdown(os.Stdout)
			return 0
		}
	}
	fmt.Fprintln(os.Stderr, "bench:", err)
	return 1
}
