package shard

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// scriptCommandRE finds the commands a script calls: redis.call("X"),
// redis.pcall("X") and lib.lua's bulk("X") and bulk_read("X").
var scriptCommandRE = regexp.MustCompile(`(?:redis\.p?call|bulk(?:_read)?)\("([A-Z]+)"`)

// scriptCommands returns the commands of a script as Redis runs it (its
// library helpers and includes assembled).
func scriptCommands(t *testing.T, name string) []string {
	t.Helper()
	src, err := scripts.Assemble(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range scriptCommandRE.FindAllStringSubmatch(src, -1) {
		out = append(out, strings.ToLower(m[1]))
	}
	if strings.Contains(src, "redis.call(cmd") && !strings.Contains(src, "bulk") {
		t.Fatalf("%s calls a command named by a variable outside bulk: list it here", name)
	}
	return out
}

// coordCommands are the commands of coord's semaphore scripts and of the
// redis_rate library's token bucket (GET, SET, TIME), which the worker's
// flow control runs.
func coordCommands(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join(testenv.ModuleRoot(t), "coord", "lua")
	var out []string
	for _, f := range []string{"lib.lua", "sem_acquire.lua", "sem_inuse.lua", "zset_release.lua", "zset_refresh.lua"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range scriptCommandRE.FindAllStringSubmatch(string(b), -1) {
			out = append(out, strings.ToLower(m[1]))
		}
	}
	return append(out, "get", "set", "time")
}

// TestACLCoversScripts: each component's commands include every command
// of the scripts it runs (Redis checks them against the caller), and
// name no script that does not exist; the worker's include coord's.
func TestACLCoversScripts(t *testing.T) {
	t.Parallel()
	for _, u := range ACLUsers("hourglass") {
		need := map[string][]string{}
		for _, s := range u.Scripts {
			for _, c := range scriptCommands(t, s) {
				need[c] = append(need[c], s)
			}
		}
		if u.Component == "worker" {
			for _, c := range coordCommands(t) {
				need[c] = append(need[c], "coord")
			}
		}
		for c, by := range need {
			if !slices.Contains(u.Commands, c) {
				t.Errorf("%s: %s (called by %s) is not among its commands", u.Component, c, strings.Join(slices.Compact(by), ", "))
			}
		}
		if dup := slices.Compact(slices.Sorted(slices.Values(u.Commands))); len(dup) != len(u.Commands) {
			t.Errorf("%s: a command is listed twice", u.Component)
		}
	}
}

var updateACL = os.Getenv("UPDATE_REDIS_ACL") != ""

// aclDocs renders the users as docs/operations.md shows them.
func aclDocs() string {
	var b strings.Builder
	for _, u := range ACLUsers("hourglass") {
		b.WriteString("**" + u.Component + "** (`hourglass-" + u.Component + "`): " + u.Does + ".\n\n```\nACL SETUSER hourglass-" + u.Component + " on >PASSWORD")
		line := len("ACL SETUSER hourglass-" + u.Component + " on >PASSWORD")
		for _, r := range u.Rules() {
			if line+1+len(r) > 100 {
				b.WriteString(" \\\n ")
				line = 1
			}
			b.WriteString(" " + r)
			line += 1 + len(r)
		}
		b.WriteString("\n```\n\n")
	}
	return b.String()
}

// TestACLDocs: docs/operations.md shows ACLUsers as they are.
// UPDATE_REDIS_ACL=1 rewrites its copy.
func TestACLDocs(t *testing.T) {
	t.Parallel()
	path := filepath.Join(testenv.ModuleRoot(t), "docs", "operations.md")
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- redis-acl:begin -->\n", "<!-- redis-acl:end -->"
	i, j := strings.Index(string(doc), begin), strings.Index(string(doc), end)
	if i < 0 || j < i {
		t.Fatalf("docs/operations.md has no %q ... %q section", begin, end)
	}
	want := aclDocs()
	if got := string(doc[i+len(begin) : j]); got != want {
		if updateACL {
			if err := os.WriteFile(path, []byte(string(doc[:i+len(begin)])+want+string(doc[j:])), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Errorf("docs/operations.md's Redis ACLs are out of date (UPDATE_REDIS_ACL=1 go test ./internal/shard -run TestACLDocs rewrites them); want:\n%s", want)
	}
}
