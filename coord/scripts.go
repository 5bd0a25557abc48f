package coord

import (
	"embed"

	"github.com/redis/go-redis/v9"

	"github.com/hourglass-sched/hourglass/internal/luascript"
)

//go:embed lua/*.lua
var luaFS embed.FS

var scripts = luascript.New(luaFS, "lua", "lib.lua")

// newScript returns an embedded script with lib.lua's helpers prepended.
func newScript(name string) *redis.Script { return scripts.WithLib(name) }

var (
	lockAcquireScript   = newScript("lock_acquire.lua")
	lockReleaseScript   = newScript("lock_release.lua")
	lockExtendScript    = newScript("lock_extend.lua")
	semAcquireScript    = newScript("sem_acquire.lua")
	semInUseScript      = newScript("sem_inuse.lua")
	zsetReleaseScript   = newScript("zset_release.lua")
	zsetRefreshScript   = newScript("zset_refresh.lua")
	rwReadScript        = newScript("rw_read.lua")
	rwWriteScript       = newScript("rw_write.lua")
	rwAbandonScript     = newScript("rw_abandon.lua")
	fixedWindowScript   = newScript("fixed_window.lua")
	slidingWindowScript = newScript("sliding_window.lua")
	leakyBucketScript   = newScript("leaky_bucket.lua")
	condWaitScript      = newScript("cond_wait.lua")
	condCheckScript     = newScript("cond_check.lua")
	condSignalScript    = newScript("cond_signal.lua")
)
