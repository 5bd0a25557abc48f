package fanout

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestIdleConnectionIsNotPingedEvery3s: an idle subscription is PINGed
// after HealthCheck of silence, not after go-redis's default 3 s, which
// cost Redis a PING every 3 s per connection of an idle deployment. The
// check can only fail when a PING is sent too early: a loaded machine
// delays PINGs, never hastens them.
func TestIdleConnectionIsNotPingedEvery3s(t *testing.T) {
	t.Parallel()
	if HealthCheck < 10*time.Second {
		t.Fatalf("HealthCheck %v, want at least 10s", HealthCheck)
	}
	for _, kind := range []Kind{Classic, Sharded} {
		t.Run(fmt.Sprint("kind ", kind), func(t *testing.T) {
			t.Parallel()
			rdb := testenv.StartRedis(t).Client(t)
			h := New(rdb, kind, nil)
			defer h.Close()
			ctx := testenv.Ctx(t, 30*time.Second)
			var r recorder
			defer h.Subscribe(ctx, "{idle}:wake", r.listen).Close()
			testenv.WaitFor(t, 10*time.Second, "subscription confirmed", func() (bool, string) {
				_, n := r.payloads()
				return n >= 1, fmt.Sprint(n)
			})
			lastCmd := func() string {
				list, err := rdb.ClientList(ctx).Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, line := range strings.Split(list, "\n") {
					if strings.Contains(line, "sub=1") || strings.Contains(line, "ssub=1") {
						for _, f := range strings.Fields(line) {
							if c, ok := strings.CutPrefix(f, "cmd="); ok {
								return c
							}
						}
					}
				}
				t.Fatalf("no subscribed connection in CLIENT LIST:\n%s", list)
				return ""
			}
			// go-redis's default would PING after 3 s of silence.
			time.Sleep(4 * time.Second)
			if c := lastCmd(); strings.Contains(c, "ping") {
				t.Fatalf("the idle subscription was PINGed within 4 s (last command %q); want silence for %v", c, HealthCheck)
			}
		})
	}
}
