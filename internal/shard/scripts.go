package shard

import (
	"context"
	"embed"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/backoff"
	"github.com/hourglass-sched/hourglass/internal/errtext"
	"github.com/hourglass-sched/hourglass/internal/luascript"
)

// The library blocks of the scripts that run on their own (enqueue.lua)
// are copies of lib.lua's helpers; this rewrites them after lib.lua
// changes (a stale copy makes the package panic at init).
//go:generate go run ../luascript/cmd/luavendor lua lib.lua

//go:embed lua/*.lua
var luaFS embed.FS

var scripts = luascript.New(luaFS, "lua", "lib.lua")

// script is one embedded Lua script, assembled by luascript: the lib.lua
// helpers it uses and the scripts it includes come with it (the file's
// own directives say which; see package luascript).
type script struct {
	name string
	*redis.Script
}

func newScript(name string) script { return script{name: name, Script: scripts.Script(name)} }

var (
	enqueueScript     = newScript("enqueue.lua")
	moveScript        = newScript("move.lua")
	moveManyScript    = newScript("movemany.lua")
	cancelScript      = newScript("cancel.lua")
	changeScript      = newScript("change.lua")
	debounceScript    = newScript("debounce.lua")
	uniqueScript      = newScript("unique.lua")
	lookupScript      = newScript("lookup.lua")
	claimScript       = newScript("claim.lua")
	ackScript         = newScript("ack.lua")
	succeedScript     = newScript("succeed.lua")
	extendScript      = newScript("extend.lua")
	nackScript        = newScript("nack.lua")
	releaseScript     = newScript("release.lua")
	recoverScript     = newScript("recover.lua")
	depthScript       = newScript("depth.lua")
	registryScript    = newScript("registry.lua")
	pauseScript       = newScript("pause.lua")
	pageScript        = newScript("page.lua")
	pageFarScript     = newScript("pagefar.lua")
	pageReadyScript   = newScript("pageready.lua")
	deadOpsScript     = newScript("deadops.lua")
	popNodeScript     = newScript("popnode.lua")
	layoutScript      = newScript("layout.lua")
	scanIDsScript     = newScript("scanids.lua")
	exportScript      = newScript("export.lua")
	exportReadyScript = newScript("exportready.lua")
	fairRefillScript  = newScript("fairrefill.lua")
	importScript      = newScript("import.lua")
	commitScript      = newScript("commit.lua")
	unimportScript    = newScript("unimport.lua")
	handoffScript     = newScript("handoff.lua")
	adoptScript       = newScript("adopt.lua")
	timeScript        = newScript("time.lua")
	// fireScript includes enqueue.lua as a function (fire.lua's
	// "@include" line): the occurrence is recorded and its task enqueued
	// in one atomic call.
	fireScript = newScript("fire.lua")
)

// EnqueueScriptSource returns enqueue.lua as embedded: the script that
// producers in other languages load. It is self-contained: the Go code
// runs exactly this text.
func EnqueueScriptSource() string { return scripts.Source("enqueue.lua") }

// isNoScript reports whether err is Redis's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// runPipelined runs one script call per element of calls in one pipeline
// round trip with EVALSHA. Calls that Redis answered with NOSCRIPT (its
// cache was empty: a restart, a failover, SCRIPT FLUSH) are sent again,
// and only those: the others already ran and must not run twice. Each
// returned command carries its own result or error; the error return is
// for a failed script load only.
//
// go-redis itself sends a whole pipeline again when its first command
// was refused before it ran (TRYAGAIN, LOADING, READONLY, ...) or the
// connection failed: use it for calls that may run twice (reads, the
// registry's writes). A call whose second run reports something else
// than its first takes runPipelinedOnce.
func (sc script) runPipelined(ctx context.Context, rdb redis.Cmdable, calls []scriptCall) ([]*redis.Cmd, error) {
	return sc.pipelined(ctx, rdb, calls, false)
}

// runPipelinedOnce is runPipelined for calls whose outcome a second run
// would misreport: an enqueue (a task stored by the first run is a
// duplicate to the second) and an ack (the second finds no lease: a
// stale token). go-redis sends a whole pipeline again, on one node of a
// cluster the whole part it sent there, when the first command was
// refused before it ran: TRYAGAIN during a slot migration or, from the
// enqueue script, while a change of the shard count seals the shards;
// LOADING, READONLY and the like. The calls after it that ran then ran
// twice, and reported the second outcome. So go-redis is told not to
// (the commands report NoRetry), and this sends again only the calls
// refused before they ran, as often as go-redis would have (its client's
// MaxRetries, a cluster client's MaxRedirects), within about 0.2 s. A
// call still refused then returns its error (TRYAGAIN ...), which
// callers retry as before. A call whose connection failed returns that
// error at once, its outcome unknown, as it did once go-redis's own
// attempts were spent.
func (sc script) runPipelinedOnce(ctx context.Context, rdb redis.Cmdable, calls []scriptCall) ([]*redis.Cmd, error) {
	return sc.pipelined(ctx, rdb, calls, true)
}

// resends returns how often go-redis would send a pipeline on rdb again
// after a refusal: the client's MaxRetries, a cluster client's
// MaxRedirects (both 3 by default, -1 for none), 3 for other clients.
func resends(rdb redis.Cmdable) int {
	n := 3
	switch c := rdb.(type) {
	case *redis.Client:
		n = c.Options().MaxRetries
	case *redis.ClusterClient:
		n = c.Options().MaxRedirects
	}
	return max(n, 0)
}

func (sc script) pipelined(ctx context.Context, rdb redis.Cmdable, calls []scriptCall, once bool) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	loaded, limit := false, resends(rdb)
	bo := backoff.Backoff{Min: 25 * time.Millisecond, Max: 100 * time.Millisecond}
	for resent := 0; ; resent++ {
		pipe := rdb.Pipeline()
		for _, i := range todo {
			if once {
				cmds[i] = sc.evalShaOnce(ctx, pipe, calls[i])
			} else {
				cmds[i] = sc.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
			}
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read by the caller
		var noScript, refused []int
		for _, i := range todo {
			switch err := cmds[i].Err(); {
			case isNoScript(err):
				noScript = append(noScript, i)
			case once && refusedBeforeRun(err):
				refused = append(refused, i)
			}
		}
		switch {
		case len(noScript) > 0 && !loaded:
			if err := sc.Load(ctx, rdb).Err(); err != nil {
				return nil, errtext.Errorf("load %s: %w", sc.name, err)
			}
			loaded = true
		case len(refused) > 0 && resent < limit:
			if !backoff.Sleep(ctx, bo.Next()) {
				return cmds, nil
			}
			noScript = nil // the cache was loaded once: a second NOSCRIPT is the answer
		default:
			return cmds, nil
		}
		todo = append(noScript, refused...)
	}
}

// evalShaOnce queues the call on pipe as a command that go-redis does
// not send again with its pipeline (runPipelinedOnce).
func (sc script) evalShaOnce(ctx context.Context, pipe redis.Pipeliner, c scriptCall) *redis.Cmd {
	args := make([]any, 0, 3+len(c.keys)+len(c.args))
	args = append(args, "evalsha", sc.Hash(), len(c.keys))
	for _, k := range c.keys {
		args = append(args, k)
	}
	args = append(args, c.args...)
	cmd := redis.NewCmd(ctx, args...)
	if len(c.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = pipe.Process(ctx, onceCmd{cmd})
	return cmd
}

// onceCmd is a command that go-redis must not send again when another
// command of its pipeline is refused or the connection fails.
type onceCmd struct{ *redis.Cmd }

// NoRetry is redis.Cmder's.
func (onceCmd) NoRetry() bool { return true }

// refusedBeforeRun reports whether err is a reply by which Redis refused
// a call before running it, so that sending it again cannot run it
// twice: the slot is migrating (TRYAGAIN; the scripts' own TRYAGAIN
// replies, too, come before any write), Redis loads its data, is a
// replica, lost its primary or its cluster. The prefixes go-redis itself
// retries.
func refusedBeforeRun(err error) bool {
	for _, p := range []string{"TRYAGAIN", "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

type scriptCall struct {
	keys []string
	args []any
}
