package deploy_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestComposeFile validates compose.yaml with docker-compose's own schema
// check (docker-compose config; no daemon or image needed), then checks
// the cluster it describes: Redis with AOF, two schedulers and two
// workers. (That the binaries accept their HOURGLASS_* settings is
// checked by the main module's internal/config, TestComposeEnvironmentsLoad:
// this module links none of Hourglass's packages, see doc.go.)
func TestComposeFile(t *testing.T) {
	cfg := readCompose(t)
	if cmd := strings.Join(cfg.Services["redis"].Command, " "); !strings.Contains(cmd, "--appendonly yes") {
		t.Errorf("redis runs %q, want AOF on", cmd)
	}
	// An operator reaches Redis and etcd from the host (redis-cli,
	// etcdctl, a CLI built there), and nothing is published beyond the
	// host's loopback.
	for name, s := range cfg.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond the host's loopback", name, p)
			}
		}
	}
	for name, port := range map[string]string{"redis": "6379", "etcd": "2379"} {
		if !slices.Contains(cfg.Services[name].Ports, "127.0.0.1:"+port+":"+port+"/tcp") {
			t.Errorf("%s: ports %v, want %s on the host's loopback", name, cfg.Services[name].Ports, port)
		}
	}
	roles := map[string]int{}
	for _, s := range cfg.Services {
		if !strings.HasPrefix(s.Image, "hourglass") {
			continue
		}
		role := "scheduler"
		if slices.Contains(s.Entrypoint, "/usr/local/bin/hourglass-worker") {
			role = "worker"
		}
		roles[role]++
	}
	if roles["scheduler"] != 2 || roles["worker"] != 2 {
		t.Errorf("hourglass services by role: %v, want 2 schedulers and 2 workers", roles)
	}
}

// composeConfig is what the tests read of docker-compose config's
// output.
type composeConfig struct {
	Services map[string]struct {
		Image      string
		Command    []string
		Entrypoint []string
		Ports      []string
	}
}

// readCompose validates compose.yaml with docker-compose's own schema
// check (docker-compose config; no daemon or image needed) and returns
// the configuration it prints.
func readCompose(t *testing.T) composeConfig {
	t.Helper()
	dc, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatalf("docker-compose not found (scripts/install-deps.sh installs it): %v", err)
	}
	out, err := exec.Command(dc, "-f", "compose.yaml", "config").CombinedOutput()
	if err != nil {
		t.Fatalf("docker-compose config: %v\n%s", err, out)
	}
	var cfg composeConfig
	if err := yaml.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestComposeHeaderCommands: the commands compose.yaml's header gives
// run the docker-compose that scripts/install-deps.sh installs (1.29,
// the separate program, not Docker's compose plugin), on this file, and
// an exec names a service of the file and a program the image holds.
func TestComposeHeaderCommands(t *testing.T) {
	deps, err := os.ReadFile("../scripts/install-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`need\+=\(docker-compose\)`).Match(deps) {
		t.Fatal("scripts/install-deps.sh no longer installs docker-compose: update this test and the header")
	}
	cfg := readCompose(t)
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	final := dockerfile(t)
	final = final[strings.LastIndex(final, "\nFROM "):]
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			break // the header ends at the first line that is not a comment
		}
		cmd := strings.Fields(strings.TrimPrefix(line, "#"))
		if len(cmd) == 0 || !strings.HasPrefix(cmd[0], "docker") {
			continue
		}
		n++
		if cmd[0] != "docker-compose" {
			t.Errorf("header runs %q: the install script installs docker-compose", strings.Join(cmd, " "))
			continue
		}
		args := cmd[1:]
		for len(args) > 1 && strings.HasPrefix(args[0], "-") {
			if args[0] == "-f" && args[1] != "deploy/compose.yaml" {
				t.Errorf("%q: -f %s, want deploy/compose.yaml (from the repository root)", line, args[1])
			}
			args = args[2:]
		}
		if len(args) > 2 && args[0] == "exec" {
			if _, ok := cfg.Services[args[1]]; !ok {
				t.Errorf("%q: no service %s", line, args[1])
			}
			if !strings.Contains(final, " /usr/local/bin/"+args[2]+"\n") {
				t.Errorf("%q: the image has no /usr/local/bin/%s", line, args[2])
			}
		}
	}
	if n == 0 {
		t.Error("the header gives no docker-compose command")
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
	for _, want := range []string{"/usr/local/bin/hourglass-scheduler", "/usr/local/bin/hourglass-worker", "/usr/local/bin/hourglass\n", "ENTRYPOINT"} {
		if !strings.Contains(final, want) {
			t.Errorf("final stage lacks %q", want)
		}
	}
	if build := regexp.MustCompile(`(?m)^RUN .*go build .*$`).FindString(text); !strings.Contains(build, "./cmd/hourglass ") && !strings.HasSuffix(build, "./cmd/hourglass") {
		t.Errorf("the build stage does not build the admin CLI: %q", build)
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
