package luascript

import (
	"strings"
	"testing"
	"testing/fstest"
)

const testLib = `-- lib: header, dropped.

-- a doubles.
local function a(x)
  return 2 * x
end

-- b calls a.
local function b(x)
  return a(x) + 1
end

-- c is named only in comments and strings.format calls.
local function c()
  return string.c
end

-- d is four.
local function d()
  return 4
end`

func TestPrune(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, script string
		want         []string // helpers kept, in lib order
	}{
		{"none", "return 1", nil},
		{"direct", "return a(1)", []string{"a"}},
		{"through another helper", "return b(1)", []string{"a", "b"}},
		{"comment and field do not count", "-- uses c()\nreturn string.c(d())", []string{"d"}},
		{"strings do not count", "return \"a(1) -- b\" .. 'a' .. \"\\\"a\" .. d()", []string{"d"}},
		{"all", "return a(1) + b(2) + c() + d()", []string{"a", "b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Prune(testLib, tc.script)
			var names []string
			for _, line := range strings.Split(got, "\n") {
				if n, ok := strings.CutPrefix(line, "local function "); ok {
					names = append(names, n[:strings.Index(n, "(")])
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("kept %v, want %v:\n%s", names, tc.want, got)
			}
			if strings.Contains(got, "header") {
				t.Fatalf("kept text outside helpers:\n%s", got)
			}
			if len(tc.want) > 0 && !strings.Contains(got, "-- "+tc.want[0]+" ") {
				t.Fatalf("dropped the comment of %s:\n%s", tc.want[0], got)
			}
		})
	}
}

// testDir is a script directory: lib is testLib; "plain" uses no helper,
// "uses" uses b (so a and b), "flags" has a flags line, "own" carries its
// helpers (a block written by Vendor), "stale" carries a wrong block,
// "fire" includes own, "needs" includes uses with parameters (its helpers
// come with needs), and the rest are includes that cannot work.
func testDir(t *testing.T) Dir {
	t.Helper()
	own, err := Vendor(testLib, "-- own: runs on its own.\n"+LibBegin+" (copied)\n"+LibEnd+"\nreturn d() + ARGV[1]")
	if err != nil {
		t.Fatal(err)
	}
	return New(fstest.MapFS{
		"s/lib.lua":      {Data: []byte(testLib)},
		"s/plain.lua":    {Data: []byte("return 1")},
		"s/uses.lua":     {Data: []byte("-- header\nreturn b(1)")},
		"s/flags.lua":    {Data: []byte("#!lua flags=allow-oom\nreturn a(1)")},
		"s/own.lua":      {Data: []byte(own)},
		"s/stale.lua":    {Data: []byte(LibBegin + "\nlocal function d()\n  return 5\nend\n" + LibEnd + "\nreturn d()")},
		"s/fire.lua":     {Data: []byte("-- @include: own.lua as run_own\nlocal r = run_own()\nreturn a(r)")},
		"s/needs.lua":    {Data: []byte("-- @include: uses.lua as f(KEYS, ARGV)\nreturn f({}, {})")},
		"s/ownneeds.lua": {Data: []byte(LibBegin + "\n" + LibEnd + "\n-- @include: uses.lua as f\nreturn f()")},
		"s/deep.lua":     {Data: []byte("-- @include: needs.lua as f\nreturn f()")},
		"s/cycle.lua":    {Data: []byte("-- @include: cycle2.lua as f\nreturn f()")},
		"s/cycle2.lua":   {Data: []byte("-- @include: cycle.lua as g\nreturn g()")},
		"s/flagged.lua":  {Data: []byte("-- @include: flags.lua as f\nreturn f()")},
	}, "s", "lib.lua")
}

func TestAssemble(t *testing.T) {
	t.Parallel()
	d := testDir(t)
	for _, tc := range []struct {
		name    string
		want    []string // in this order in the assembled text
		notWant []string
		same    bool // runs as the file is
	}{
		{name: "plain.lua", same: true},
		{name: "uses.lua", want: []string{"local function a(", "local function b(", "-- header", "return b(1)"}, notWant: []string{"local function d("}},
		{name: "flags.lua", want: []string{"#!lua flags=allow-oom\n-- a doubles.", "local function a(", "return a(1)"}},
		{name: "own.lua", same: true, want: []string{LibBegin, "local function d(", LibEnd, "return d()"}, notWant: []string{"local function a("}},
		{name: "needs.lua", want: []string{"local function a(", "local function b(", "local function f(KEYS, ARGV)\n-- header\nreturn b(1)\nend", "return f({}, {})"}, notWant: []string{"local function d("}},
		{name: "fire.lua", want: []string{"local function a(", "local function run_own()\n-- own: runs on its own.", "local function d(", "return d() + ARGV[1]\nend", "-- @include: own.lua as run_own\nlocal r = run_own()"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := d.Assemble(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if tc.same && got != d.Source(tc.name) {
				t.Fatalf("assembled text differs from the file:\n%s", got)
			}
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q missing (or out of order) in:\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Fatalf("%q in:\n%s", w, got)
				}
			}
		})
	}
	for name, want := range map[string]string{
		"stale.lua":    "block is not the library's helpers",
		"ownneeds.lua": "not self-contained",
		"deep.lua":     "not self-contained",
		"cycle.lua":    "includes itself",
		"flagged.lua":  "flags line",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := d.Assemble(name); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Assemble(%s) = %v, want an error with %q", name, err, want)
			}
		})
	}
}

func TestVendor(t *testing.T) {
	t.Parallel()
	src := "-- x\n" + LibBegin + " (copied)\nlocal function d()\n  return 5\nend\n" + LibEnd + "\nreturn b(1)"
	got, err := Vendor(testLib, src)
	if err != nil {
		t.Fatal(err)
	}
	want := "-- x\n" + LibBegin + " (copied)\n" + Prune(testLib, "b(1)") + "\n" + LibEnd + "\nreturn b(1)"
	if got != want {
		t.Fatalf("Vendor:\n%s\nwant:\n%s", got, want)
	}
	if again, err := Vendor(testLib, got); err != nil || again != got {
		t.Fatalf("Vendor of its own output changed it: %v\n%s", err, again)
	}
	for _, bad := range []string{"return 1", LibEnd + "\n" + LibBegin, LibBegin + "\n" + LibBegin + "\n" + LibEnd} {
		if _, err := Vendor(testLib, bad); err == nil {
			t.Errorf("Vendor(%q) succeeded", bad)
		}
	}
}
