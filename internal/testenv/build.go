package testenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ModuleRoot returns the directory holding go.mod, found by walking up
// from the working directory of the test.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// builds serializes the builds of this process (a file lock in the
// directory serializes them with other test binaries) and remembers what
// this process built: one go build per binary and test binary, even when
// it finds the binary up to date, since every run of the go command costs
// a second or more of a busy machine while the other tests wait on the
// lock.
var builds struct {
	sync.Mutex
	bins map[string]string // flavor and package -> binary
}

// binStale is how long a checkout's binaries may go unused before a
// build of another checkout removes them.
const binStale = 72 * time.Hour

// GoBuildFlags returns the flags the tests build binaries with: -race,
// unless HGTEST_RACE=0 (for measuring), and -ldflags=-w. A test that has
// the go command build (the demo's build of its binaries, `make demo`)
// passes them too, so that its packages are those the race-enabled tests
// compiled already, not a second, plain compile of the whole module.
func GoBuildFlags() []string {
	// Without DWARF (-w): a fifth less link time; traces and race
	// reports still name files and lines.
	if os.Getenv("HGTEST_RACE") == "0" {
		return []string{"-ldflags=-w"}
	}
	return []string{"-race", "-ldflags=-w"}
}

// BuildBinary builds the main package at pkg (relative to the module
// root, for example "./cmd/scheduler") with the race detector (unless
// HGTEST_RACE=0, for measuring), and returns the binary's path.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	return BuildBinaries(t, pkg)[0]
}

// BuildFaultBinary is BuildBinary with the faultinject tag too: the
// binary's fault points (worker/fault_inject.go), inert otherwise, are
// switched on by HG_FAULT. Only a test that injects a fault uses it: the
// tag changes package worker, so every package above it is compiled
// again for these binaries, and the demo's go build of the binaries
// (without the tag) can reuse what the other tests' binaries compiled.
func BuildFaultBinary(t testing.TB, pkg string) string {
	t.Helper()
	return buildFlavor(t, true, []string{pkg})[0]
}

// BuildBinaries builds the main packages pkgs in one go build (which
// links them in parallel) as BuildBinary does, and returns their paths in
// the order of pkgs.
//
// The binaries live in a directory shared by every test binary of this
// checkout (under the user's cache directory, named for the module root
// and the race setting): the packages of one `go test ./...` link each
// binary once, and a later run relinks only what changed, because go
// build leaves a binary alone when its build ID says its inputs are the
// same. A file lock keeps concurrent test binaries from building at
// once. Directories of checkouts unused for three days are removed.
func BuildBinaries(t testing.TB, pkgs ...string) []string {
	t.Helper()
	return buildFlavor(t, false, pkgs)
}

// buildFlavor builds pkgs, with the faultinject tag if fault, into the
// flavor's directory, once per process.
func buildFlavor(t testing.TB, fault bool, pkgs []string) []string {
	t.Helper()
	flavor := "race"
	if !slices.Contains(GoBuildFlags(), "-race") {
		flavor = "plain"
	}
	if fault {
		flavor += "-faultinject"
	}
	builds.Lock()
	defer builds.Unlock()
	var todo []string
	for _, pkg := range pkgs {
		if _, ok := builds.bins[flavor+" "+pkg]; !ok {
			todo = append(todo, pkg)
		}
	}
	if len(todo) > 0 {
		build(t, flavor, fault, todo)
	}
	out := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		out[i] = builds.bins[flavor+" "+pkg]
	}
	return out
}

// build runs go build for pkgs into the checkout's directory of flavor
// under its file lock and records the binaries in builds.bins (whose lock
// the caller holds).
func build(t testing.TB, flavor string, fault bool, pkgs []string) {
	t.Helper()
	root := ModuleRoot(t)
	args := append([]string{"build"}, GoBuildFlags()...)
	if fault {
		args = append(args, "-tags", "faultinject")
	}
	dir, err := binDir(root, flavor)
	if err != nil {
		t.Fatalf("testenv: binaries' directory: %v", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatalf("testenv: lock %s: %v", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	now := time.Now()
	_ = os.Chtimes(lock.Name(), now, now) // in use: see binDir
	cmd := exec.Command("go", append(append(args, "-o", dir+string(filepath.Separator)), pkgs...)...)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build %v: %v\n%s", pkgs, err, b)
	}
	if builds.bins == nil {
		builds.bins = map[string]string{}
	}
	for _, pkg := range pkgs {
		builds.bins[flavor+" "+pkg] = filepath.Join(dir, filepath.Base(pkg))
	}
}

// binDir returns (and makes) the binaries' directory of the checkout at
// root, and removes those of checkouts whose lock file was last touched
// more than binStale ago.
func binDir(root, flavor string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	base := filepath.Join(cache, "hourglass-testbin")
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(base, hex.EncodeToString(sum[:8]), flavor)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	olds, _ := filepath.Glob(filepath.Join(base, "*", "*", ".lock"))
	for _, l := range olds {
		if fi, err := os.Stat(l); err == nil && time.Since(fi.ModTime()) > binStale && filepath.Dir(l) != dir {
			os.RemoveAll(filepath.Dir(l))
			os.Remove(filepath.Dir(filepath.Dir(l))) // once every flavor is gone
		}
	}
	return dir, nil
}

// Main runs the tests and exits with their status. Use it from TestMain:
// func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	os.Exit(code)
}
