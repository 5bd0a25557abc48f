package main_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cleanEnv is the test's environment without HOURGLASS_ variables, so
// that only the test's settings reach the binary (and with testenv's
// GORACE, so that the binary exits at once).
func cleanEnv(extra ...string) []string {
	var env []string
	for _, kv := range testenv.Environ() {
		if !strings.HasPrefix(kv, "HOURGLASS_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// runWorker runs the binary to its end and returns its exit status and
// output.
func runWorker(t *testing.T, args, env []string) (int, string) {
	t.Helper()
	cmd := exec.Command(testenv.BuildBinary(t, "./cmd/worker"), args...)
	cmd.Env = cleanEnv(env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, out.String()
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("worker %q did not exit; output:\n%s", args, out.String())
		return 0, ""
	}
}

func TestConfigErrorsExit2(t *testing.T) {
	t.Parallel()
	yaml := filepath.Join(t.TempDir(), "worker.yaml")
	if err := os.WriteFile(yaml, []byte("queues:\n  q:\n    http:\n      url: http://h/\n    command: [/bin/true]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		args, env []string
		want      string
	}{
		{"http and command", []string{"-config", yaml}, nil,
			"config: queues.q: set either http.url or command, not both"},
		{"http and command from flags", []string{"-set", "queues.q.http.url=http://h/", "-set", "queues.q.command=/bin/true"}, nil,
			"config: queues.q: set either http.url or command, not both"},
		{"no target", nil, nil,
			"config: queues: no queue has an http.url or command; nothing to consume"},
		{"no target among named queues", []string{"-set", "queues.a.concurrency=3"}, nil,
			"config: queues: no queue has an http.url or command; nothing to consume"},
		{"bad url", []string{"-set", "queues.hooks.http.url=ftp://h/x"}, nil,
			"config: queues.hooks.http.url: must be an http:// or https:// URL"},
		{"bad url from env", nil, []string{"HOURGLASS_QUEUES__HOOKS__HTTP__URL=not a url"},
			"config: queues.hooks.http.url:"},
		{"unknown key", []string{"-set", "queues.q.command=/bin/true", "-set", "worker.threads=2"}, nil,
			"config: worker.threads: unknown key"},
		{"fetch_timeout", []string{"-set", "queues.q.command=/bin/true", "-set", "worker.fetch_timeout=500ms"}, nil,
			"config: worker.fetch_timeout:"},
		{"redis cluster with a db", []string{"-set", "queues.q.command=/bin/true", "-set", "redis.mode=cluster", "-set", "redis.addr=",
			"-set", "redis.addrs=127.0.0.1:7000", "-set", "redis.db=2"}, nil, "config: redis.db: must be 0 in mode cluster"},
		// A TLS file was read only at the first connection: exit 1,
		// without the key's name (issue 24, item 12).
		{"TLS file missing", []string{"-set", "queues.q.command=/bin/true", "-set", "redis.tls.enabled=true", "-set", "redis.tls.ca_file=/no/such/ca.pem"}, nil,
			"config: redis.tls.ca_file: open /no/such/ca.pem: no such file or directory (-set redis.tls.ca_file)"},
		{"TLS file not PEM", []string{"-set", "queues.q.command=/bin/true"}, []string{"HOURGLASS_REDIS__TLS__ENABLED=true", "HOURGLASS_REDIS__TLS__CA_FILE=/dev/null"},
			"config: redis.tls.ca_file: /dev/null holds no PEM certificate (environment variable HOURGLASS_REDIS__TLS__CA_FILE)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, out := runWorker(t, tt.args, tt.env)
			if code != 2 || !strings.Contains(out, tt.want) {
				t.Errorf("exit %d, output:\n%s\nwant exit 2 and %q", code, out, tt.want)
			}
		})
	}
}

// A command target whose program does not exist fails the start (exit
// 1, naming the queue and the program) instead of failing every task.
func TestMissingProgramFailsStart(t *testing.T) {
	t.Parallel()
	code, out := runWorker(t, []string{"-set", "queues.q.command=/no/such/program", "-set", "http.addr="}, nil)
	if code != 1 || !strings.Contains(out, "queue q: command: program") || !strings.Contains(out, "/no/such/program") || !strings.Contains(out, "cannot be run") {
		t.Errorf("exit %d, output:\n%s\nwant exit 1 naming the program", code, out)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out := runWorker(t, []string{"-version"}, nil)
	if code != 0 || !strings.HasPrefix(out, "hourglass ") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	code, out := runWorker(t, []string{"-h"}, nil)
	if code != 0 || !strings.Contains(out, "-set key=value") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// A worker whose queue no scheduler registered in its namespace exits 1
// once worker.registration_wait has passed, its message naming the
// namespace and the queue, instead of running on while consuming nothing.
func TestUnregisteredQueueExits1(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	registerQueues(t, r, "jobs") // in the default namespace
	code, out := runWorker(t, []string{
		"-set", "redis.addr=" + r.Addr, "-set", "http.addr=", "-set", "namespace=staging",
		"-set", "worker.registration_wait=200ms", "-set", "worker.fetch_timeout=1s",
		"-set", "queues.jobs.command=/bin/true",
	}, nil)
	for _, want := range []string{`queue not registered by any scheduler: \"jobs\" in namespace \"staging\"`, `namespace \"hourglass\" registers \"jobs\"`} {
		if code != 1 || !strings.Contains(out, want) {
			t.Errorf("exit %d, output:\n%s\nwant exit 1 and %s", code, out, want)
		}
	}
}

// registerQueues registers queues in r's default namespace, as a
// scheduler with the default configuration would.
func registerQueues(t *testing.T, r *testenv.Redis, queues ...string) {
	t.Helper()
	l, err := shard.NewLayout(shard.DefaultNamespace, shard.DefaultShards)
	if err != nil {
		t.Fatal(err)
	}
	policies := map[string]shard.QueuePolicy{}
	for _, q := range queues {
		policies[q] = shard.QueuePolicy{MaxRetries: shard.DefaultMaxRetries, Timeout: shard.DefaultTimeout, MaxPayload: shard.DefaultMaxPayload}
	}
	if err := shard.NewStore(r.Client(t), l).RegisterQueues(testenv.Ctx(t, 10*time.Second), policies); err != nil {
		t.Fatal(err)
	}
}

// The worker starts against a real Redis, serves its endpoints and exits
// 0 on SIGTERM. (Delivering tasks is tested end to end elsewhere.)
func TestServesEndpointsAndStops(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	registerQueues(t, r, "jobs") // else the worker exits after worker.registration_wait
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	p := testenv.StartProcess(t, "worker", testenv.BuildBinary(t, "./cmd/worker"), []string{
		"-set", "redis.addr=" + r.Addr,
		"-set", "http.addr=" + addr,
		"-set", "worker.fetch_timeout=1s",
		"-set", "queues.jobs.command=/bin/true",
		"-set", "queues.idle.concurrency=1", // no target: not consumed
	}, cleanEnv())

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.WaitFor(t, 20*time.Second, "/healthz", func() (bool, string) {
		code, body := get("/healthz")
		return code == 200 && body == "ok\n", fmt.Sprint(code, body)
	})
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q, want 200", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Errorf("/metrics = %d, missing Go or process metrics:\n%.500s", code, body)
	}

	r.Kill()
	testenv.WaitFor(t, 10*time.Second, "/readyz to fail without Redis", func() (bool, string) {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable, fmt.Sprint(code, body)
	})

	r.Restart()
	testenv.WaitFor(t, 10*time.Second, "/readyz after Redis is back", func() (bool, string) {
		code, body := get("/readyz")
		return code == 200, fmt.Sprint(code, body)
	})

	if err := p.Terminate(15 * time.Second); err != nil {
		t.Errorf("exit after SIGTERM: %v, want status 0", err)
	}
}
