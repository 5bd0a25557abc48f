package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hourglass-sched/hourglass/internal/config"
)

// TestComposeFile validates compose.yaml with docker-compose's own schema
// check (docker-compose config; no daemon or image needed), then checks
// the cluster it describes: Redis with AOF, two schedulers and two
// workers, whose HOURGLASS_* settings the binaries accept.
func TestComposeFile(t *testing.T) {
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose not found (scripts/install-deps.sh installs it): %v", err)
	}
	out, err := exec.Command(dc, "-f", "compose.yaml", "config").CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var cfg struct {
		Services map[string]struct {
			Image       string
			Command     []string
			Entrypoint  []string
			Environment map[string]string
		}
	}
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	if cmd := strings.Join(cfg.Services["redis"].Command, " "); !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis runs %q, want AOF on", cmd)
	}
	roles := map[string]int{}
	for name, s := range cfg.Services {
		if !strings.HasPrefix(s.Image, "hourglass") {
			continue
		}
		role := "scheduler"
		if slices.Contains(s.Entrypoint, "/usr/local/bin/hourglass-worker") {
			role = "worker"
		}
		roles[role]++
		var env []string
		for k, v := range s.Environment {
			env = append(env, k+"="+v)
		}
		if _, err := config.Load(nil, env); err != nil {
			t.Errorf("%s: its environment does not load: %v", name, err)
		}
	}
	if roles["scheduler"] != 2 || roles["worker"] != 2 {
		t.Errorf("hourglass services by role: %v, want 2 schedulers and 2 workers", roles)
	}
}

// TestDockerfile checks the image's shape: a minimal final stage without
// a shell, a non-root user given by number (the Kubernetes manifests'
// runAsNonRoot needs one, TestPodsRunAsNonRootUnderTheImageUser), and
// the binaries where the unit files, manifests and compose file run
// them. (Building it needs the base images from a registry, which this
// machine cannot reach.)
func TestDockerfile(t *testing.T) {
	text := dockerfile(t)
	froms := regexp.MustCompile(`(?m)^FROM (\S+)`).FindAllStringSubmatch(text, -1)
	if len(froms) != 2 || !strings.HasPrefix(froms[1][1], "gcr.io/distroless/static") {
		t.Errorf("stages %v: want a build stage and a distroless static final stage", froms)
	}
	final := text[strings.LastIndex(text, "\nFROM "):]
	for _, want := range []string{"/usr/local/bin/hourglass-scheduler", "/usr/local/bin/hourglass-worker", "ENTRYPOINT"} {
		if !strings.Contains(final, want) {
			t.Errorf("final stage lacks %q", want)
		}
	}
	if u := imageUser(t); !regexp.MustCompile(`^[1-9][0-9]*:[0-9]+$`).MatchString(u) {
		t.Errorf("final stage's USER %q: want a non-root uid:gid by number", u)
	}
}

func dockerfile(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// imageUser returns the user the image runs as: the final stage's last
// USER ("" when it sets none; the base image's user then applies).
func imageUser(t *testing.T) string {
	t.Helper()
	text := dockerfile(t)
	final := text[strings.LastIndex(text, "\nFROM "):]
	users := regexp.MustCompile(`(?m)^USER (\S+)\s*$`).FindAllStringSubmatch(final, -1)
	if len(users) == 0 {
		return ""
	}
	return users[len(users)-1][1]
}
