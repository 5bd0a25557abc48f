package shard

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/luascript"
)

//go:embed lua/*.lua
var luaFS embed.FS

var scripts = luascript.New(luaFS, "lua", "lib.lua")

// script is one embedded Lua script. Scripts other than enqueue.lua (the
// self-contained protocol script) get lib.lua's helpers prepended.
type script struct {
	name string
	*redis.Script
}

func newScript(name string, withLib bool) script {
	if withLib {
		return script{name: name, Script: scripts.WithLib(name)}
	}
	return script{name: name, Script: scripts.Plain(name)}
}

var (
	enqueueScript   = newScript("enqueue.lua", false)
	moveScript      = newScript("move.lua", true)
	cancelScript    = newScript("cancel.lua", true)
	lookupScript    = newScript("lookup.lua", true)
	claimScript     = newScript("claim.lua", true)
	ackScript       = newScript("ack.lua", true)
	extendScript    = newScript("extend.lua", true)
	nackScript      = newScript("nack.lua", true)
	releaseScript   = newScript("release.lua", true)
	recoverScript   = newScript("recover.lua", true)
	depthScript     = newScript("depth.lua", true)
	registryScript  = newScript("registry.lua", false)
	pauseScript     = newScript("pause.lua", false)
	pageScript      = newScript("page.lua", true)
	pageFarScript   = newScript("pagefar.lua", true)
	pageReadyScript = newScript("pageready.lua", true)
	deadOpsScript   = newScript("deadops.lua", true)
	popNodeScript   = newScript("popnode.lua", false)
	layoutScript    = newScript("layout.lua", false)
	scanIDsScript   = newScript("scanids.lua", false)
	exportScript    = newScript("export.lua", true)
	importScript    = newScript("import.lua", true)
	commitScript    = newScript("commit.lua", true)
	unimportScript  = newScript("unimport.lua", true)
	handoffScript   = newScript("handoff.lua", true)
	adoptScript     = newScript("adopt.lua", false)
	// fireScript is fire.lua (with the lib helpers it uses) with
	// enqueue.lua's text in its enqueue function: the occurrence is
	// recorded and its task enqueued in one atomic call.
	fireScript = script{name: "fire.lua", Script: redis.NewScript(strings.Replace(scripts.LibSource("fire.lua"),
		"-- @ENQUEUE@ (enqueue.lua's text is put here)", scripts.Source("enqueue.lua"), 1))}
)

// EnqueueScriptSource returns enqueue.lua as embedded: the script that
// producers in other languages load.
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
func (sc script) runPipelined(ctx context.Context, rdb redis.Cmdable, calls []scriptCall) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	todo := make([]int, len(calls))
	for i := range todo {
		todo[i] = i
	}
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		for _, i := range todo {
			cmds[i] = sc.EvalSha(ctx, pipe, calls[i].keys, calls[i].args...)
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read by the caller
		var again []int
		for _, i := range todo {
			if isNoScript(cmds[i].Err()) {
				again = append(again, i)
			}
		}
		if attempt > 0 || len(again) == 0 {
			return cmds, nil
		}
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("shard: load %s: %w", sc.name, err)
		}
		todo = again
	}
}

type scriptCall struct {
	keys []string
	args []any
}
