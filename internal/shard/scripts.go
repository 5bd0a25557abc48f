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

// script is one embedded Lua script. Scripts other than enqueue.lua and
// ack.lua get lib.lua's helpers prepended.
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
	enqueueScript = newScript("enqueue.lua", false)
	moveScript    = newScript("move.lua", true)
	cancelScript  = newScript("cancel.lua", true)
	lookupScript  = newScript("lookup.lua", true)
	claimScript   = newScript("claim.lua", true)
	ackScript     = newScript("ack.lua", false)
	extendScript  = newScript("extend.lua", true)
	nackScript    = newScript("nack.lua", true)
	releaseScript = newScript("release.lua", true)
	recoverScript = newScript("recover.lua", true)
)

// EnqueueScriptSource returns enqueue.lua as embedded: the script that
// producers in other languages load.
func EnqueueScriptSource() string { return scripts.Source("enqueue.lua") }

// isNoScript reports whether err is Redis's NOSCRIPT reply.
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}

// runPipelined runs one script call per element of calls in one pipeline
// round trip with EVALSHA, loading the script and retrying once if the
// server did not have it cached. Each returned command carries its own
// result or error; the error return is for a failed script load only.
func (sc script) runPipelined(ctx context.Context, rdb redis.Cmdable, calls []scriptCall) ([]*redis.Cmd, error) {
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			cmds[i] = sc.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read by the caller
		if attempt > 0 || !anyNoScript(cmds) {
			return cmds, nil
		}
		if err := sc.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("shard: load %s: %w", sc.name, err)
		}
	}
}

type scriptCall struct {
	keys []string
	args []any
}

func anyNoScript(cmds []*redis.Cmd) bool {
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			return true
		}
	}
	return false
}
