package shard

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

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
	cancelScript      = newScript("cancel.lua")
	lookupScript      = newScript("lookup.lua")
	claimScript       = newScript("claim.lua")
	ackScript         = newScript("ack.lua")
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
	importScript      = newScript("import.lua")
	commitScript      = newScript("commit.lua")
	unimportScript    = newScript("unimport.lua")
	handoffScript     = newScript("handoff.lua")
	adoptScript       = newScript("adopt.lua")
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
