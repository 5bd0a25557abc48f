// Package luascript assembles the Lua scripts that Hourglass embeds with
// go:embed: one .lua file per script, and a library file of helper
// functions. Scripts run with go-redis's Script, which sends EVALSHA and
// falls back to EVAL when Redis does not have the script cached (after a
// restart or a failover).
//
// # Assembly
//
// One mechanism (Dir.Assemble) turns every script file into the text
// Redis runs, from two kinds of directives in the file:
//
//   - Library helpers. A script calls helpers of the library file by name
//     ("local function name(" at the start of a line, see Prune). The
//     assembler puts those it uses, directly or through other helpers,
//     in front of the script. A script that other languages load as it
//     is in the repository (it must run on its own) carries them itself
//     instead, between a line starting with LibBegin and the line LibEnd:
//     the assembler checks that this block is exactly the helpers it
//     would put in front (Vendor writes it), and puts nothing there.
//   - Includes. A line "-- @include: other.lua as name" defines, ahead of
//     the script's own text, "local function name()" whose body is
//     other.lua as it is. Called, it runs other.lua on the caller's KEYS
//     and ARGV (the caller may shorten ARGV first) and returns what
//     other.lua returns. fire.lua runs the enqueue protocol so, as one
//     atomic script. With parameters, "-- @include: other.lua as
//     name(KEYS, ARGV)" defines "local function name(KEYS, ARGV)": the
//     caller passes other.lua its own KEYS and ARGV tables, so that one
//     script can run another several times on different keys
//     (movemany.lua runs move.lua once per shard). An included script
//     that uses library helpers gets them from the including script's
//     head, once, so only a script that does not carry its own helpers
//     may include it.
//
// A first line "#!lua ..." (a script's flags) stays first. A script that
// has neither directive and uses no helper runs as it is.
package luascript

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The lines around a library block that a self-contained script carries
// (see the package comment). The begin line may go on with an
// explanation; the end line is exactly LibEnd.
const (
	LibBegin = "-- @lib: begin"
	LibEnd   = "-- @lib: end"
)

// includeRE matches an include directive: the file, the function name
// and its optional parameter list.
var includeRE = regexp.MustCompile(`(?m)^-- @include: ([A-Za-z0-9_.-]+\.lua) as ([A-Za-z_][A-Za-z0-9_]*)(?:\(([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)\))?$`)

// Dir is a directory of embedded scripts and their library file.
type Dir struct {
	fs  fs.FS
	dir string
	lib string
}

// New returns the scripts in dir of fsys; lib names the library file
// ("" for none).
func New(fsys fs.FS, dir, lib string) Dir { return Dir{fs: fsys, dir: dir, lib: lib} }

// Source returns a script file's text as it is. It panics if the file is
// missing: files are embedded at build time, so that is a programming
// error caught by any test that loads the script.
func (d Dir) Source(name string) string {
	b, err := fs.ReadFile(d.fs, path.Join(d.dir, name))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (d Dir) libText() string {
	if d.lib == "" {
		return ""
	}
	return d.Source(d.lib)
}

// Assemble returns the text Redis runs for the script name: its library
// helpers, the functions it includes, then its own text (see the package
// comment). It fails for a library block that is not what Vendor would
// write, an include of a script that is not self-contained, or an
// include cycle.
func (d Dir) Assemble(name string) (string, error) {
	return d.assemble(name, nil)
}

func (d Dir) assemble(name string, including []string) (string, error) {
	for _, n := range including {
		if n == name {
			return "", fmt.Errorf("luascript: %s includes itself (%s)", name, strings.Join(append(including, name), " -> "))
		}
	}
	src := d.Source(name)
	flags := ""
	if strings.HasPrefix(src, "#!") {
		i := strings.IndexByte(src, '\n')
		if i < 0 {
			return src, nil
		}
		flags, src = src[:i+1], src[i+1:]
	}
	lib := d.libText()
	vendored, rest, ok, err := splitBlock(src)
	if err != nil {
		return "", fmt.Errorf("luascript: %s: %w", name, err)
	}
	var fns []string
	uses := src // the text whose helpers go in the head
	for _, m := range includeRE.FindAllStringSubmatch(src, -1) {
		file, fn, params := m[1], m[2], m[3]
		body, err := d.assemble(file, append(including, name))
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(body, "#!") {
			return "", fmt.Errorf("luascript: %s includes %s, which has a flags line", name, file)
		}
		if raw := d.Source(file); body != raw {
			// It needs helpers: they come from this script's head, which
			// a script carrying its own block does not have, and nothing
			// but helpers may be missing from the file as it is.
			if ok || includeRE.MatchString(raw) {
				return "", fmt.Errorf("luascript: %s includes %s, which is not self-contained (it needs library helpers it does not carry)", name, file)
			}
			body, uses = raw, uses+"\n"+raw
		}
		fns = append(fns, "local function "+fn+"("+params+")\n"+body+"\nend")
	}
	var head string
	if ok {
		if want := Prune(lib, rest); vendored != want {
			return "", fmt.Errorf("luascript: %s: its %s block is not the library's helpers it uses; rewrite it with luascript.Vendor (go generate runs it)", name, LibBegin)
		}
	} else {
		head = Prune(lib, uses)
	}
	var parts []string
	if head != "" {
		parts = append(parts, head)
	}
	parts = append(parts, fns...)
	if len(parts) == 0 {
		return flags + src, nil
	}
	return flags + strings.Join(parts, "\n\n") + "\n" + src, nil
}

// Script returns the assembled script name (Assemble). It panics when
// the script does not assemble: the files are embedded at build time,
// so that is a programming error caught by any test that loads it.
func (d Dir) Script(name string) *redis.Script {
	text, err := d.Assemble(name)
	if err != nil {
		panic(err)
	}
	return redis.NewScript(text)
}

// WithLib returns the assembled script name; it is Script, under the
// name its callers know.
func (d Dir) WithLib(name string) *redis.Script { return d.Script(name) }

// blockLines returns the indexes of a script's library block lines, -1
// and -1 when it has none.
func blockLines(lines []string) (begin, end int, err error) {
	begin, end = -1, -1
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, LibBegin):
			if begin >= 0 {
				return 0, 0, fmt.Errorf("two %s lines", LibBegin)
			}
			begin = i
		case l == LibEnd:
			if end >= 0 {
				return 0, 0, fmt.Errorf("two %s lines", LibEnd)
			}
			end = i
		}
	}
	if (begin < 0) != (end < 0) || end < begin {
		return 0, 0, fmt.Errorf("%s and %s do not enclose a block", LibBegin, LibEnd)
	}
	return begin, end, nil
}

// splitBlock returns the text between a script's library block lines and
// the script without it (the begin and end lines stay: comments, they
// name no helper that counts). ok is false when the script has no block.
func splitBlock(src string) (block, rest string, ok bool, err error) {
	lines := strings.Split(src, "\n")
	begin, end, err := blockLines(lines)
	if err != nil || begin < 0 {
		return "", src, false, err
	}
	block = strings.Join(lines[begin+1:end], "\n")
	rest = strings.Join(append(slices.Clone(lines[:begin+1]), lines[end:]...), "\n")
	return block, rest, true, nil
}

// Vendor returns script with its library block (see the package comment)
// rewritten to the helpers of lib that the rest of script uses, each
// with the comment above it, in lib's order: the block Assemble checks.
// script must already have the block's begin and end lines.
func Vendor(lib, script string) (string, error) {
	lines := strings.Split(script, "\n")
	begin, end, err := blockLines(lines)
	if err != nil {
		return "", fmt.Errorf("luascript: %w", err)
	}
	if begin < 0 {
		return "", fmt.Errorf("luascript: no %s ... %s block to write", LibBegin, LibEnd)
	}
	_, rest, _, _ := splitBlock(script)
	out := append(slices.Clone(lines[:begin+1]), Prune(lib, rest))
	return strings.Join(append(out, lines[end:]...), "\n"), nil
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
	todo := []string{script}
	for len(todo) > 0 {
		names := identifiers(stripComments(todo[len(todo)-1]))
		todo = todo[:len(todo)-1]
		for i, h := range helpers {
			if !used[i] && names[h.name] {
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

// identifiers returns the names code uses as whole Lua identifiers, not
// as a field or method (after "." or ":"). One pass over the text: every
// process that loads the scripts prunes them at start, and a regular
// expression per helper made that take a second in race-enabled binaries.
func identifiers(code string) map[string]bool {
	word := func(c byte) bool {
		return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	names := map[string]bool{}
	for i := 0; i < len(code); {
		if !word(code[i]) {
			i++
			continue
		}
		j := i
		for j < len(code) && word(code[j]) {
			j++
		}
		if i == 0 || code[i-1] != '.' && code[i-1] != ':' {
			names[code[i:j]] = true
		}
		i = j
	}
	return names
}

// stripComments drops Lua line comments ("--" to the end of the line)
// and the contents of quoted strings, so that a helper named only in a
// comment or in a message ("the shard count is changing") is not counted
// as used. Long strings ([[...]]) do not occur in these scripts.
func stripComments(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		var b strings.Builder
		var quote byte // the open string's quote, 0 outside strings
	scan:
		for j := 0; j < len(l); j++ {
			c := l[j]
			switch {
			case quote != 0 && c == '\\':
				j++ // the escaped character
			case quote != 0 && c == quote:
				quote = 0
				b.WriteByte(c)
			case quote != 0:
			case c == '"' || c == '\'':
				quote = c
				b.WriteByte(c)
			case c == '-' && j+1 < len(l) && l[j+1] == '-':
				break scan
			default:
				b.WriteByte(c)
			}
		}
		lines[i] = b.String()
	}
	return strings.Join(lines, "\n")
}
