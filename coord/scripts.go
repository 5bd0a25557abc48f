package coord

import (
	"embed"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFS embed.FS

func mustRead(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic(err) // embedded at build time; cannot fail at run time
	}
	return string(b)
}

// newScript returns an embedded script with lib.lua's helpers prepended.
// Script.Run sends EVALSHA and falls back to EVAL when the server does not
// have the script cached (after a restart or a failover).
func newScript(name string) *redis.Script {
	return redis.NewScript(mustRead("lib.lua") + "\n" + mustRead(name))
}

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
)
