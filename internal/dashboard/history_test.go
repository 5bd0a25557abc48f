package dashboard

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"testing"
	"time"

	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// TestHistoryAPI: GET history answers a queue's history in columns of
// equal length, in a step that keeps a range within HistoryPoints; a
// cancel through inspect is counted; a bad range or queue is refused.
func TestHistoryAPI(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{})
	ctx := testenv.Ctx(t, 10*time.Second)
	if _, err := in.Cancel(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	for since, step := range map[string]int64{"": 60, "6h": 60, "24h": 300, "168h": 1800} {
		code, body := do(t, http.MethodGet, srv.URL+"/ui/api/history?queue="+shardtest.Queue+"&since="+since, nil)
		var c historyColumns
		if err := json.Unmarshal([]byte(body), &c); code != http.StatusOK || err != nil {
			t.Fatalf("since %q: %d %v %s", since, code, err, body)
		}
		if c.StepS != step || len(c.At) == 0 || len(c.At) > HistoryPoints+1 || len(c.P99Ms) != len(c.At) || len(c.OldestS) != len(c.At) {
			t.Fatalf("since %q: step %d (want %d), %d points", since, c.StepS, step, len(c.At))
		}
		var cancelled uint64
		for i, n := range c.Cancelled {
			cancelled += n
			if c.P50Ms[i] != nil {
				t.Errorf("a lateness quantile without starts: %v", *c.P50Ms[i])
			}
		}
		if cancelled != 1 {
			t.Errorf("since %q: %d cancelled, want 1", since, cancelled)
		}
	}
	for _, q := range []string{"queue=q&since=30s", "queue=q&since=200h", "queue=q&since=soon", "queue=bad%20queue"} {
		if code, body := do(t, http.MethodGet, srv.URL+"/ui/api/history?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", q, code, body)
		}
	}
}

// TestVendoredUPlot: the charting library embedded is uPlot 1.6.32 as
// npm ships it (docs/dashboard.md says how to update it).
func TestVendoredUPlot(t *testing.T) {
	t.Parallel()
	for name, sum := range map[string]string{
		"assets/vendor/uplot/uPlot.iife.min.js": "19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f",
		"assets/vendor/uplot/uPlot.min.css":     "df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04",
	} {
		b, err := fs.ReadFile(assets, name)
		if err != nil {
			t.Fatal(err)
		}
		if h := sha256.Sum256(b); hex.EncodeToString(h[:]) != sum {
			t.Errorf("%s changed: sha256 %x, want %s", name, h, sum)
		}
	}
}
