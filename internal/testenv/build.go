package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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

var builds struct {
	sync.Mutex
	dir  string
	bins map[string]string
}

// BuildBinary builds the main package at pkg (relative to the module
// root, for example "./cmd/scheduler") with the race detector (unless
// HGTEST_RACE=0, for measuring) and the faultinject tag (fault points a
// test switches on with HG_FAULT; inert otherwise), and returns
// the binary's path. A test binary builds each package once; Main removes
// the binaries when the tests end.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	builds.Lock()
	defer builds.Unlock()
	if p, ok := builds.bins[pkg]; ok {
		return p
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "hourglass-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.bins = d, map[string]string{}
	}
	out := filepath.Join(builds.dir, filepath.Base(pkg))
	args := []string{"build", "-tags", "faultinject", "-race", "-o", out, pkg}
	if os.Getenv("HGTEST_RACE") == "0" {
		args = []string{"build", "-tags", "faultinject", "-o", out, pkg}
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = ModuleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build %s: %v\n%s", pkg, err, b)
	}
	builds.bins[pkg] = out
	return out
}

// Main runs the tests and then removes the binaries BuildBinary made.
// Use it from TestMain: func TestMain(m *testing.M) { testenv.Main(m) }.
func Main(m *testing.M) {
	code := m.Run()
	builds.Lock()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	builds.Unlock()
	os.Exit(code)
}
