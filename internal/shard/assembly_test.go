package shard

import (
	"io/fs"
	"strings"
	"testing"
)

// TestScriptAssembly: every script assembles (package luascript: its
// lib.lua helpers, its includes); the scripts that docs/protocol.md says
// other languages load as they are run in Go exactly as the files are
// (so a producer that loads enqueue.lua runs what the Go client runs,
// with the same SHA1); and fire.lua runs enqueue.lua's text as it is.
func TestScriptAssembly(t *testing.T) {
	t.Parallel()
	names, err := fs.Glob(luaFS, "lua/*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, n := range names {
		n = strings.TrimPrefix(n, "lua/")
		if n == "lib.lua" {
			continue
		}
		if _, err := scripts.Assemble(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	for _, n := range []string{"enqueue.lua", "registry.lua", "pause.lua", "popnode.lua"} {
		if got, _ := scripts.Assemble(n); got != scripts.Source(n) {
			t.Errorf("%s is documented as self-contained, but Go runs another text than the file's", n)
		}
	}
	if enqueueScript.Hash() != newScript("enqueue.lua").Hash() || EnqueueScriptSource() != scripts.Source("enqueue.lua") {
		t.Error("EnqueueScriptSource is not the script the Go client runs")
	}
	fire, err := scripts.Assemble("fire.lua")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fire, "local function enqueue_protocol()\n"+EnqueueScriptSource()+"\nend\n") {
		t.Error("fire.lua does not run enqueue.lua's text as enqueue_protocol")
	}
}
