package config_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/knadh/koanf/parsers/yaml"

	"github.com/hourglass-sched/hourglass/internal/config"
)

// The settings that deploy/'s files give the binaries load here, with the
// binaries' own build of this package. deploy/'s module checks the files
// themselves with the real tools and API types (deploy/docker_test.go,
// deploy/kubernetes_test.go); it links none of Hourglass's packages, whose
// compile for that module alone (without -race) cost make test more CPU
// than all its checks.

// deployDir is deploy/ seen from this package's directory.
var deployDir = filepath.Join("..", "..", "deploy")

// TestComposeEnvironmentsLoad: the environment of every hourglass service
// of deploy/compose.yaml, as docker-compose config resolves it, loads.
func TestComposeEnvironmentsLoad(t *testing.T) {
	t.Parallel()
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose not found (scripts/install-deps.sh installs it): %v", err)
	}
	cmd := exec.Command(dc, "-f", "compose.yaml", "config")
	cmd.Dir = deployDir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	doc, err := yaml.Parser().Unmarshal(out)
	if err != nil {
		t.Fatal(err)
	}
	services, _ := doc["services"].(map[string]any)
	n := 0
	for name, s := range services {
		svc, _ := s.(map[string]any)
		if image, _ := svc["image"].(string); !strings.HasPrefix(image, "hourglass") {
			continue
		}
		n++
		vars, _ := svc["environment"].(map[string]any)
		var env []string
		for k, v := range vars {
			env = append(env, fmt.Sprintf("%s=%v", k, v))
		}
		sort.Strings(env)
		if _, err := config.Load(nil, env); err != nil {
			t.Errorf("%s: its environment does not load: %v\n%s", name, err, strings.Join(env, "\n"))
		}
	}
	if n == 0 {
		t.Fatalf("no hourglass service in docker-compose config's output:\n%s", out)
	}
}

// TestConfigMapLoads: the config.yaml of deploy/kubernetes's ConfigMap
// loads, and its dashboard cannot be changed by whoever reaches the pod
// (the Secret "hourglass" may add basic auth, HOURGLASS_HTTP__DASHBOARD__*;
// without it the dashboard must not be writable on the pod's address).
func TestConfigMapLoads(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(deployDir, "kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	var body string
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			m, err := yaml.Parser().Unmarshal([]byte(doc))
			if err != nil {
				t.Fatalf("%s #%d: %v", f, i, err)
			}
			if m["kind"] != "ConfigMap" {
				continue
			}
			n++
			data, _ := m["data"].(map[string]any)
			body, _ = data["config.yaml"].(string)
		}
	}
	if n != 1 || body == "" {
		t.Fatalf("%d ConfigMaps, config.yaml %q: want one ConfigMap with a config.yaml", n, body)
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]string{"-config", path}, nil)
	if err != nil {
		t.Fatalf("the ConfigMap's config.yaml does not load: %v", err)
	}
	if cfg.HTTP.ExposesWritableDashboard() {
		t.Errorf("the ConfigMap serves a writable dashboard without auth on %s: set http.dashboard.read_only", cfg.HTTP.Addr)
	}
}
