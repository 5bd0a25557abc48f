package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestWarnsOfAnExposedDashboard: a replica whose writable dashboard
// without auth listens on every interface says so at start, next to the
// address it serves; read-only, it does not.
func TestWarnsOfAnExposedDashboard(t *testing.T) {
	t.Parallel()
	const warning = "the dashboard is writable, has no auth and listens on a non-loopback address"
	for _, readOnly := range []bool{false, true} {
		cfg, _, _ := replicaConfig(t, "exposed")
		cfg.HTTP.Addr = "0.0.0.0:0"
		cfg.HTTP.Dashboard.ReadOnly = readOnly
		_, logs := runReplica(t, cfg)
		testenv.WaitFor(t, 10*time.Second, "serving http", func() (bool, string) {
			return strings.Contains(logs.String(), "serving http"), logs.String()
		})
		if got := strings.Contains(logs.String(), warning); got == readOnly {
			t.Errorf("read-only %v: warned %v:\n%s", readOnly, got, logs.String())
		}
	}
}
