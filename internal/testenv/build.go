package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

func goarch() string { return runtime.GOARCH }

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

// BuildBinary builds the main package at pkg (relative to the module
// root, for example "./cmd/scheduler") with the race detector into a
// temporary directory and returns the binary's path. The Go build cache
// keeps repeated builds cheap.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-race", "-o", out, pkg)
	cmd.Dir = ModuleRoot(t)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: go build %s: %v\n%s", pkg, err, b)
	}
	return out
}
