// Package luascript loads the Lua scripts that Hourglass embeds with
// go:embed: one .lua file per script, optionally with the helper
// functions it uses from a shared library file prepended. Scripts run with go-redis's Script,
// which sends EVALSHA and falls back to EVAL when Redis does not have the
// script cached (after a restart or a failover).
package luascript

import (
	"embed"
	"path"
	"regexp"
	"strings"

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

// WithLib returns the script name with the library's helpers it uses
// prepended (see Prune).
func (d Dir) WithLib(name string) *redis.Script {
	return redis.NewScript(d.LibSource(name))
}

// LibSource returns the text WithLib runs: the helpers of the library
// that the script name uses, then the script.
func (d Dir) LibSource(name string) string {
	src := d.Source(name)
	return Prune(d.Source(d.lib), src) + "\n" + src
}

// Prune returns the helpers of lib that script uses, directly or through
// other helpers, in lib's order, each with the comment above it. A helper
// is a top-level "local function name(" whose body ends with a line "end"
// at the start of a line; what lib has outside helpers is dropped. Redis
// runs a script's whole text on every call, so every helper prepended
// costs a closure per call even if the script never calls it.
func Prune(lib, script string) string {
	type helper struct {
		name, text string
	}
	var helpers []helper
	var comment []string
	lines := strings.Split(lib, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		name, ok := strings.CutPrefix(line, "local function ")
		if !ok {
			if strings.HasPrefix(line, "--") {
				comment = append(comment, line)
			} else {
				comment = nil
			}
			continue
		}
		name, _, _ = strings.Cut(name, "(")
		body := append(comment, line)
		comment = nil
		for i++; i < len(lines); i++ {
			body = append(body, lines[i])
			if lines[i] == "end" {
				break
			}
		}
		helpers = append(helpers, helper{name: strings.TrimSpace(name), text: strings.Join(body, "\n")})
	}
	// Mark what the script uses, then what the marked helpers use, until
	// nothing new is marked (helpers may call helpers defined above them).
	used := make([]bool, len(helpers))
	names := make([]*regexp.Regexp, len(helpers))
	for i, h := range helpers {
		names[i] = identRE(h.name)
	}
	todo := []string{script}
	for len(todo) > 0 {
		code := stripComments(todo[len(todo)-1])
		todo = todo[:len(todo)-1]
		for i, h := range helpers {
			if !used[i] && names[i].MatchString(code) {
				used[i] = true
				todo = append(todo, h.text)
			}
		}
	}
	var out []string
	for i, h := range helpers {
		if used[i] {
			out = append(out, h.text)
		}
	}
	return strings.Join(out, "\n\n")
}

// identRE matches name as a whole Lua identifier.
func identRE(name string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_.:])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`)
}

// stripComments drops Lua line comments ("--" to the end of the line), so
// that a helper named only in a comment is not counted as used. Strings
// containing "--" do not occur in these scripts' code.
func stripComments(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if j := strings.Index(l, "--"); j >= 0 {
			lines[i] = l[:j]
		}
	}
	return strings.Join(lines, "\n")
}
