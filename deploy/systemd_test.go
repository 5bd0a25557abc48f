package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnitsVerify runs systemd-analyze verify on each unit, with
// ExecStart pointed at an executable that exists here (the binaries are
// not installed on the test machine; verify checks that the path exists).
// Any warning fails the test.
func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze not found (scripts/install-deps.sh installs it): %v", err)
	}
	units, err := filepath.Glob("systemd/*.service")
	if err != nil || len(units) != 2 {
		t.Fatalf("units: %v %v", units, err)
	}
	dir := t.TempDir()
	var paths []string
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(filepath.Base(u), ".service")
		text := strings.Replace(string(b), "ExecStart=/usr/local/bin/"+name+" ", "ExecStart=/bin/true ", 1)
		if text == string(b) {
			t.Fatalf("%s: ExecStart does not run /usr/local/bin/%s", u, name)
		}
		p := filepath.Join(dir, filepath.Base(u))
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	out, err := exec.Command(analyze, append([]string{"verify"}, paths...)...).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
