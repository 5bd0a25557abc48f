package shard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// protocolExample returns the shell block of docs/protocol.md between the
// protocol-example markers.
func protocolExample(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "<!-- protocol-example:begin -->")
	end := strings.Index(doc, "<!-- protocol-example:end -->")
	if start < 0 || end < start {
		t.Fatal("docs/protocol.md lacks the protocol-example markers")
	}
	block := doc[start:end]
	block = block[strings.Index(block, "```sh")+len("```sh") : strings.LastIndex(block, "```")]
	return block
}

// TestProtocolExampleWorks runs the redis-cli example of docs/protocol.md
// as written and checks the task it stores: in shard 14 of 16 without a
// layout record, in shard 30 of 32 once the count was changed to 32.
func TestProtocolExampleWorks(t *testing.T) {
	t.Parallel()
	testenv.LookBinary(t, "redis-cli")
	root := testenv.ModuleRoot(t)
	for _, tc := range []struct {
		name          string
		resize, shard int
	}{{"never resized", 0, 14}, {"resized to 32", 32, 30}} {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.StartRedis(t)
			l, _ := NewLayout("hourglass", 16)
			s := NewStore(r.Client(t), l)
			ctx := testenv.Ctx(t, 30*time.Second)
			if err := s.RegisterQueues(ctx, map[string]QueuePolicy{"default": {MaxRetries: 25, Timeout: 30 * time.Second, MaxPayload: 1 << 20}}); err != nil {
				t.Fatal(err)
			}
			if tc.resize > 0 {
				l, err := s.BeginResize(ctx, tc.resize)
				if err != nil {
					t.Fatal(err)
				}
				for sh := range l.Existing() {
					if _, err := s.ShardDone(ctx, l, sh); err != nil {
						t.Fatal(err)
					}
				}
			}
			run := func() string {
				cmd := exec.Command("bash", "-euo", "pipefail", "-c", protocolExample(t, root))
				cmd.Dir = root
				cmd.Env = append(os.Environ(), "REDIS_PORT="+r.Addr[strings.LastIndex(r.Addr, ":")+1:])
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("example failed: %v\n%s", err, out)
				}
				return string(out)
			}
			before := time.Now()
			out := strings.Fields(run())
			if len(out) < 2 || out[0] != "1" {
				t.Fatalf("first run printed %q, want 1 and a due time", out)
			}
			info, err := s.Lookup(context.Background(), "order-42")
			if err != nil {
				t.Fatal(err)
			}
			if info.Shard != tc.shard || info.State != "scheduled" || string(info.Task.Payload) != `{"order":42}` || info.Task.Queue != "default" || info.Task.MaxRetries != 25 {
				t.Fatalf("stored task: %+v, want it in shard %d", info, tc.shard)
			}
			// The script reads Redis's clock after bash and redis-cli
			// started: seconds late on a loaded machine, never early.
			if d := info.Task.Due.Sub(before); d < 29*time.Second || d > 40*time.Second {
				t.Fatalf("due %s after the call, want about 30s", d)
			}
			again := strings.Fields(run())
			if len(again) < 3 || again[0] != "0" || again[1] != out[1] || again[2] != "scheduled" {
				t.Fatalf("second run printed %q, want 0, %s, scheduled", again, out[1])
			}
		})
	}
}
