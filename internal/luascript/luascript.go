// Package luascript loads the Lua scripts that Hourglass embeds with
// go:embed: one .lua file per script, optionally with a shared library
// file of helper functions prepended. Scripts run with go-redis's Script,
// which sends EVALSHA and falls back to EVAL when Redis does not have the
// script cached (after a restart or a failover).
package luascript

import (
	"embed"
	"path"

	"github.com/redis/go-redis/v9"
)

// Dir is a directory of embedded scripts.
type Dir struct {
	fs  embed.FS
	dir string
	lib string
}

// New returns the scripts in dir of fs; lib names the library file that
// WithLib prepends ("" for none).
func New(fs embed.FS, dir, lib string) Dir { return Dir{fs: fs, dir: dir, lib: lib} }

// Source returns a script file's text. It panics if the file is missing:
// files are embedded at build time, so that is a programming error caught
// by any test that loads the script.
func (d Dir) Source(name string) string {
	b, err := d.fs.ReadFile(path.Join(d.dir, name))
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Plain returns the script name as it is.
func (d Dir) Plain(name string) *redis.Script { return redis.NewScript(d.Source(name)) }

// WithLib returns the script name with the library's helpers prepended.
func (d Dir) WithLib(name string) *redis.Script {
	return redis.NewScript(d.Source(d.lib) + "\n" + d.Source(name))
}
