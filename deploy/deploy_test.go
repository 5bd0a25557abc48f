// Package deploy_test checks the deployment files in deploy/ with the
// real tools that read them. (The Grafana dashboard's metric names are
// checked against running binaries in e2e.)
package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestSystemdUnitsVerify runs systemd-analyze verify on each unit, with
// ExecStart pointed at an executable that exists here (the binaries are
// not installed on the test machine; verify checks that the path exists).
func TestSystemdUnitsVerify(t *testing.T) {
	analyze := testenv.LookBinary(t, "systemd-analyze")
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
