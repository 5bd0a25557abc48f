package dashboard

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/shard"
	"github.com/hourglass-sched/hourglass/internal/shardtest"
	"github.com/hourglass-sched/hourglass/internal/testenv"
	"github.com/hourglass-sched/hourglass/periodic"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newServer serves a dashboard over a fresh Redis with queue "q", two
// scheduled tasks and two dead letters.
func newServer(t *testing.T, o Options) (*httptest.Server, *inspect.Inspector) {
	t.Helper()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	e.Schedule(shardtest.Queue, time.Hour, "s1", "s2")
	e.Dead(shardtest.Queue, "d", 2)
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	o.Inspector = in
	srv := httptest.NewServer(New(o))
	t.Cleanup(srv.Close)
	return srv, in
}

// do sends a request and returns the status and body.
func do(t *testing.T, method, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testenv.Ctx(t, 10*time.Second), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		switch k {
		case "auth":
		case "Host":
			req.Host = v
		default:
			req.Header.Set(k, v)
		}
	}
	if u, p, ok := strings.Cut(hdr["auth"], ":"); ok {
		req.SetBasicAuth(u, p)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var ui = map[string]string{CSRFHeader: "1"}

func TestReadsAndChanges(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{})
	ctx := testenv.Ctx(t, 10*time.Second)
	code, body := do(t, "GET", srv.URL+"/ui/api/queues", nil)
	var qs struct {
		Queues []inspect.Queue
		Total  inspect.Counts
	}
	if err := json.Unmarshal([]byte(body), &qs); code != 200 || err != nil || len(qs.Queues) != 1 || qs.Total.Scheduled != 2 || qs.Total.Dead != 2 {
		t.Fatalf("queues: %d %s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/", nil); code != 200 || !strings.Contains(body, "<title>Hourglass</title>") {
		t.Fatalf("page: %d %.100s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/dead?error=shardtest", nil); code != 200 || !strings.Contains(body, `"d0"`) {
		t.Fatalf("dead: %d %s", code, body)
	}
	if code, _ := do(t, "GET", srv.URL+"/ui/api/task?id=nope", nil); code != 404 {
		t.Fatalf("unknown task: %d", code)
	}
	if code, _ := do(t, "GET", srv.URL+"/ui/api/dead?cursor=garbage", nil); code != 400 {
		t.Fatalf("bad cursor: %d", code)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/dead/d0/replay", nil); code != 403 || !strings.Contains(body, CSRFHeader) {
		t.Fatalf("replay without the CSRF header: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/dead/d0/replay", ui); code != 200 {
		t.Fatalf("replay: %d %s", code, body)
	}
	if tk, err := in.Task(ctx, "d0"); err != nil || tk.State != inspect.StateScheduled {
		t.Fatalf("after replay: %+v %v", tk, err)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/dead/d1/purge", ui); code != 200 {
		t.Fatalf("purge: %d", code)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/dead/d1/purge", ui); code != 404 {
		t.Fatalf("purge again: %d", code)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/queues/q/pause", ui); code != 200 {
		t.Fatalf("pause: %d", code)
	}
	if q, err := in.Queue(ctx, "q"); err != nil || q.State != inspect.QueuePaused {
		t.Fatalf("after pause: %+v %v", q, err)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/queues/q/resume", ui); code != 200 {
		t.Fatalf("resume: %d", code)
	}
	if q, err := in.Queue(ctx, "q"); err != nil || q.State != inspect.QueueActive {
		t.Fatalf("after resume: %+v %v", q, err)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/queues/q/explode", ui); code != 404 || !strings.Contains(body, `"error"`) {
		t.Fatalf("unknown action: %d %s", code, body)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/tasks/s1/cancel", ui); code != 200 {
		t.Fatalf("cancel: %d", code)
	}
	if _, err := in.Task(ctx, "s1"); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("s1 after cancel: %v", err)
	}
	var st Stats
	if code, body := do(t, "GET", srv.URL+"/ui/api/stats", nil); code != 200 || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("stats: %d %s", code, body)
	}
	// Keys' weights (fair queues): set, listed, refused out of bounds.
	if code, body := do(t, "POST", srv.URL+"/ui/api/queues/q/weight?key=tenant-42&weight=0", ui); code != 200 {
		t.Fatalf("weight: %d %s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/weights?queue=q", nil); code != 200 || !strings.Contains(body, `"tenant-42":0`) {
		t.Fatalf("weights: %d %s", code, body)
	}
	for path, want := range map[string]int{"queues/q/weight?key=k&weight=x": 400, "queues/q/weight?key=k&weight=1001": 400,
		"queues/q/weight?key=a%7Db&weight=2": 400, "queues/nope/weight?key=k&weight=2": 404,
		"queues/q/keycap?key=k&concurrency=x": 400, "queues/q/keycap?key=k&concurrency=-1": 400,
		"queues/nope/keycap?key=k&concurrency=2": 404,
		"queues/q/keyrate?key=k&rate=x":          400, "queues/q/keyrate?key=k&rate=5&period=soon": 400,
		"queues/q/keyrate?key=k&rate=5&period=1500us": 400, "queues/nope/keyrate?key=k&rate=2": 404,
		"queues/q/keyrate?key=k&rate=5&kind=bucket": 400} {
		if code, body := do(t, "POST", srv.URL+"/ui/api/"+path, ui); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, body, want)
		}
	}
	// Keys' concurrency caps: set, listed, back to the default.
	for _, path := range []string{"queues/q/keycap?key=tenant-42&concurrency=3", "queues/q/keycap?key=tenant-7&concurrency=2",
		"queues/q/keycap?key=tenant-7&concurrency=default"} {
		if code, body := do(t, "POST", srv.URL+"/ui/api/"+path, ui); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/weights?queue=q", nil); code != 200 || !strings.Contains(body, `"caps":{"default":0,"keys":{"tenant-42":3},"rates":{}}`) {
		t.Fatalf("weights with caps: %d %s", code, body)
	}
	// Keys' rates: set, listed, back to the default.
	for _, path := range []string{"queues/q/keyrate?key=partner-7&rate=50&period=1s&burst=5", "queues/q/keyrate?key=partner-8&rate=0",
		"queues/q/keyrate?key=partner-8&rate=default", "queues/q/keyrate?key=partner-9&rate=20&period=1m&kind=sliding_window"} {
		if code, body := do(t, "POST", srv.URL+"/ui/api/"+path, ui); code != 200 {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/weights?queue=q", nil); code != 200 ||
		!strings.Contains(body, `"rates":{"partner-7":{"rate":50,"period":1000000000,"burst":5},"partner-9":{"rate":20,"period":60000000000,"burst":1,"kind":"sliding_window"}}`) {
		t.Fatalf("weights with rates: %d %s", code, body)
	}
}

// TestRescheduleAndReplace: the task panel's changes, with the rules of
// every change (the CSRF header; read-only refuses them, TestReadOnly).
func TestRescheduleAndReplace(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{})
	ctx := testenv.Ctx(t, 10*time.Second)
	if code, body := do(t, "POST", srv.URL+"/ui/api/tasks/s1/reschedule?at=2h", nil); code != 403 || !strings.Contains(body, CSRFHeader) {
		t.Fatalf("reschedule without the CSRF header: %d %s", code, body)
	}
	before := time.Now()
	if code, body := do(t, "POST", srv.URL+"/ui/api/tasks/s1/reschedule?at=2h", ui); code != 200 {
		t.Fatalf("reschedule: %d %s", code, body)
	}
	if tk, err := in.Task(ctx, "s1"); err != nil || tk.Due.Before(before.Add(2*time.Hour-time.Second)) || tk.Due.After(time.Now().Add(2*time.Hour)) {
		t.Fatalf("s1 after the reschedule: %+v %v; want due in 2 h", tk, err)
	}
	at := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	if code, body := do(t, "POST", srv.URL+"/ui/api/tasks/s1/reschedule?at="+url.QueryEscape(at.Format(time.RFC3339)), ui); code != 200 {
		t.Fatalf("reschedule to an RFC 3339 time: %d %s", code, body)
	}
	if tk, _ := in.Task(ctx, "s1"); !tk.Due.Equal(at) {
		t.Fatalf("s1 due %v, want %v", tk.Due, at)
	}
	for path, want := range map[string]int{"tasks/s1/reschedule?at=someday": 400, "tasks/nope/reschedule?at=1h": 404, "tasks/d0/reschedule?at=1h": 409} {
		if code, body := do(t, "POST", srv.URL+"/ui/api/"+path, ui); code != want {
			t.Errorf("%s: %d %s, want %d", path, code, body, want)
		}
	}
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/ui/api/tasks/s2/replace", strings.NewReader("new payload"))
	req.Header.Set(CSRFHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("replace: %v %v", resp, err)
	}
	resp.Body.Close()
	if tk, err := in.Task(ctx, "s2"); err != nil || string(tk.Payload) != "new payload" {
		t.Fatalf("s2 after the replace: %+v %v", tk, err)
	}
}

// TestRedisTimeoutIsGatewayTimeout (issue 24, item 12): a Redis call
// that timed out on its read deadline (go-redis's "i/o timeout", a
// net.Error, not context.DeadlineExceeded) answered 500, where
// docs/dashboard.md promises 504. A stopped Redis now gets 504 for reads
// and changes, and the dashboard answers 200 again once it is back.
func TestRedisTimeoutIsGatewayTimeout(t *testing.T) {
	t.Parallel()
	r := testenv.StartRedis(t)
	// As the binaries' clients (connect.Redis) but with a short read
	// timeout and no retries, so the read times out well within the
	// request's bound.
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	l, err := shard.NewLayout("ui", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := shard.NewStore(rdb, l).RegisterQueues(testenv.Ctx(t, 10*time.Second), map[string]shard.QueuePolicy{"q": shardtest.Policy()}); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(rdb, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in}))
	t.Cleanup(srv.Close)

	r.Pause()
	for _, req := range [][2]string{{"GET", "/ui/api/queues"}, {"GET", "/ui/api/task?id=x"}, {"POST", "/ui/api/queues/q/pause"}} {
		code, body := do(t, req[0], srv.URL+req[1], ui)
		if code != http.StatusGatewayTimeout || !strings.Contains(body, "i/o timeout") {
			t.Errorf("%s %s with Redis stopped: %d %s; want 504", req[0], req[1], code, body)
		}
	}
	r.Resume()
	if code, body := do(t, "GET", srv.URL+"/ui/api/queues", nil); code != http.StatusOK {
		t.Fatalf("queues with Redis back: %d %s", code, body)
	}
}

// TestRunningTask: a running task cannot be rescheduled (409); it can be
// cancelled, and then shows as cancelled.
func TestRunningTask(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	running := e.Popped(shardtest.Queue, "r", 1)
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in}))
	t.Cleanup(srv.Close)
	id := running[0].Task.ID
	if code, body := do(t, "POST", srv.URL+"/ui/api/tasks/"+id+"/reschedule?at=1h", ui); code != 409 {
		t.Fatalf("reschedule of a running task: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/tasks/"+id+"/cancel", ui); code != 200 {
		t.Fatalf("cancel of a running task: %d %s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/task?id="+id, nil); code != 200 || !strings.Contains(body, `"state":"cancelled"`) {
		t.Fatalf("the cancelled task: %d %s", code, body)
	}
}

// TestRecent: GET recent answers a queue's ended tasks, newest first,
// with their results; an invalid queue name is a 400.
func TestRecent(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2,
		Queues: map[string]shard.QueuePolicy{"q": {MaxRetries: 3, Timeout: time.Minute, Retention: shard.Retention{Age: time.Hour}}}})
	d := e.Popped("q", "ok", 1)[0]
	if err := e.Store.Succeed(testenv.Ctx(t, 10*time.Second), d.AckArgs(true), []byte("a result")); err != nil {
		t.Fatal(err)
	}
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in}))
	t.Cleanup(srv.Close)
	code, body := do(t, "GET", srv.URL+"/ui/api/recent?queue=q", nil)
	var got struct{ Tasks []inspect.Task }
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil || len(got.Tasks) != 1 ||
		got.Tasks[0].ID != "ok0" || got.Tasks[0].State != inspect.StateSucceeded || string(got.Tasks[0].Result) != "a result" {
		t.Errorf("GET recent: %d %s (%v)", code, body, err)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/recent?queue=no%20such", nil); code != 400 {
		t.Errorf("GET recent of an invalid queue name: %d %s, want 400", code, body)
	}
}

// TestChangesNeedTheHeaderFromTheSameSite: a change without the header,
// with another value, or from another site is refused and changes
// nothing.
func TestChangesNeedTheHeaderFromTheSameSite(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{})
	for _, hdr := range []map[string]string{
		nil,
		{CSRFHeader: "yes"},
		{CSRFHeader: "1", "Sec-Fetch-Site": "cross-site"},
		{CSRFHeader: "1", "Sec-Fetch-Site": "same-site"},
	} {
		if code, body := do(t, "POST", srv.URL+"/ui/api/dead/d0/purge", hdr); code != 403 {
			t.Errorf("purge with %v: %d %s", hdr, code, body)
		}
	}
	if tk, err := in.Task(testenv.Ctx(t, 10*time.Second), "d0"); err != nil || tk.State != inspect.StateDead {
		t.Fatalf("d0 changed by a refused request: %+v %v", tk, err)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/dead/d0/purge", map[string]string{CSRFHeader: "1", "Sec-Fetch-Site": "same-origin"}); code != 200 {
		t.Fatalf("same-origin purge: %d", code)
	}
}

// TestHostCheck: a Host that is not an IP address, localhost or an
// allowed name (a DNS-rebinding page's) is refused.
func TestHostCheck(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, Options{AllowedHosts: []string{"hg.example.com"}})
	for host, want := range map[string]int{
		"":                    200, // the test server's 127.0.0.1:port
		"localhost:9464":      200,
		"[::1]:9464":          200,
		"10.0.0.7":            200,
		"HG.example.com:8443": 200,
		"evil.example":        403,
		"evil.example:9464":   403,
	} {
		hdr := map[string]string{}
		if host != "" {
			hdr["Host"] = host
		}
		if code, _ := do(t, "GET", srv.URL+"/ui/api/config", hdr); code != want {
			t.Errorf("Host %q: %d, want %d", host, code, want)
		}
	}
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{ReadOnly: true})
	if code, body := do(t, "GET", srv.URL+"/ui/api/config", nil); code != 200 || !strings.Contains(body, `"read_only":true`) {
		t.Fatalf("config: %d %s", code, body)
	}
	for _, path := range []string{"/ui/api/dead/d0/replay", "/ui/api/dead/d0/purge", "/ui/api/queues/q/pause",
		"/ui/api/queues/q/resume", "/ui/api/tasks/s1/cancel", "/ui/api/tasks/s1/reschedule?at=1h", "/ui/api/tasks/s1/replace",
		"/ui/api/schedules/tick/pause", "/ui/api/schedules/tick/resume", "/ui/api/queues/q/weight?key=k&weight=2", "/ui/api/queues/q/keycap?key=k&concurrency=2", "/ui/api/queues/q/keyrate?key=k&rate=2"} {
		if code, _ := do(t, "POST", srv.URL+path, ui); code != 403 {
			t.Errorf("%s in read-only mode: %d", path, code)
		}
	}
	if tk, err := in.Task(testenv.Ctx(t, 10*time.Second), "d0"); err != nil || tk.State != inspect.StateDead {
		t.Fatalf("d0 changed in read-only mode: %+v %v", tk, err)
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, Options{Username: "ops", Password: "s3cret"})
	for _, c := range []struct {
		auth string
		want int
	}{{"", 401}, {"ops:wrong", 401}, {"other:s3cret", 401}, {"ops:s3cret", 200}} {
		if code, _ := do(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"auth": c.auth}); code != c.want {
			t.Errorf("auth %q: %d, want %d", c.auth, code, c.want)
		}
	}
}

// TestSchedules: GET schedules shows the schedules the Schedules option
// returns at the time of the request, with the last occurrence recorded,
// three next occurrences and the pause state; pause and resume need the
// header like every change; a pause of a schedule not shown is a 404, a
// resume of one is not (it clears a pause left behind, as the CLI's).
func TestSchedules(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testenv.Ctx(t, 10*time.Second)
	compile := func(s periodic.Schedule) *periodic.Compiled {
		t.Helper()
		c, err := s.Compile()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	tick := compile(periodic.Schedule{Name: "tick", Queue: shardtest.Queue, Interval: 10 * time.Second})
	nightly := compile(periodic.Schedule{Name: "nightly", Queue: shardtest.Queue, Cron: "30 2 * * *", TimeZone: "Europe/Paris"})
	var defs atomic.Pointer[[]*periodic.Compiled]
	defs.Store(&[]*periodic.Compiled{tick, nightly})
	srv := httptest.NewServer(New(Options{Inspector: in, Schedules: func() []*periodic.Compiled { return *defs.Load() }}))
	t.Cleanup(srv.Close)

	l := e.Layout()
	fired := time.Now().Truncate(10 * time.Second)
	if r, err := e.Store.Fire(ctx, l.HomeShard("tick"), shard.FireArgs{Schedule: "tick", Occurrence: fired, Epoch: shardtest.Epoch,
		Task: shard.EnqueueArgs{ID: l.OccurrenceID("tick", fired), Queue: shardtest.Queue, Due: fired, MaxRetries: -1}}); err != nil || r.Outcome != shard.Fired {
		t.Fatalf("fire: %+v %v", r, err)
	}
	list := func() map[string]inspect.ScheduleInfo {
		t.Helper()
		code, body := do(t, "GET", srv.URL+"/ui/api/schedules", nil)
		var got struct{ Schedules []inspect.ScheduleInfo }
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("schedules: %d %s", code, body)
		}
		m := map[string]inspect.ScheduleInfo{}
		for _, s := range got.Schedules {
			m[s.Name] = s
		}
		return m
	}
	got := list()
	tk, ni := got["tick"], got["nightly"]
	if len(got) != 2 || !tk.LastFired.Equal(fired) || tk.Spec != "every 10s" || tk.Queue != shardtest.Queue || tk.Paused ||
		len(tk.Next) != 3 || !tk.Next[0].After(fired) || tk.Next[1].Sub(tk.Next[0]) != 10*time.Second {
		t.Fatalf("tick: %+v (of %d)", tk, len(got))
	}
	if !ni.LastFired.IsZero() || ni.TimeZone != "Europe/Paris" || ni.Spec != "30 2 * * *" || len(ni.Next) != 3 {
		t.Fatalf("nightly: %+v", ni)
	}

	if code, body := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", nil); code != 403 || !strings.Contains(body, CSRFHeader) {
		t.Fatalf("pause without the CSRF header: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", map[string]string{CSRFHeader: "1", "Sec-Fetch-Site": "cross-site"}); code != 403 {
		t.Fatalf("pause from another site: %d %s", code, body)
	}
	if list()["tick"].Paused {
		t.Fatal("tick paused by a refused request")
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", ui); code != 200 {
		t.Fatalf("pause: %d %s", code, body)
	}
	if tk := list()["tick"]; !tk.Paused || tk.PausedAt.IsZero() {
		t.Fatalf("after pause: %+v", tk)
	}
	if ss, err := in.Schedules(ctx, []*periodic.Compiled{tick}, time.Now(), 0); err != nil || !ss[0].Paused {
		t.Fatalf("after pause, through inspect: %+v %v", ss, err)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/schedules/nope/pause", ui); code != 404 || !strings.Contains(body, `"error"`) {
		t.Fatalf("pause of an unknown schedule: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/schedules/tick/resume", ui); code != 200 {
		t.Fatalf("resume: %d %s", code, body)
	}
	if list()["tick"].Paused {
		t.Fatal("tick still paused after resume")
	}

	// The schedules shown follow the option: tick no longer fired (a
	// registered schedule removed) is neither listed nor pausable, and
	// its pause can still be cleared.
	if code, _ := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", ui); code != 200 {
		t.Fatalf("pause again: %d", code)
	}
	defs.Store(&[]*periodic.Compiled{nightly})
	if got := list(); len(got) != 1 || got["nightly"].Name != "nightly" {
		t.Fatalf("after tick is gone: %+v", got)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", ui); code != 404 {
		t.Fatalf("pause of a schedule no longer fired: %d", code)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/schedules/tick/resume", ui); code != 200 {
		t.Fatalf("resume of a schedule no longer fired: %d", code)
	}
	if ss, err := in.Schedules(ctx, []*periodic.Compiled{tick}, time.Now(), 0); err != nil || ss[0].Paused {
		t.Fatalf("tick's pause not cleared: %+v %v", ss, err)
	}
}

// TestNoSchedules: without the Schedules option the list is empty and
// nothing can be paused.
func TestNoSchedules(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, Options{})
	if code, body := do(t, "GET", srv.URL+"/ui/api/schedules", nil); code != 200 || strings.TrimSpace(body) != `{"schedules":[]}` {
		t.Fatalf("schedules: %d %s", code, body)
	}
	if code, _ := do(t, "POST", srv.URL+"/ui/api/schedules/tick/pause", ui); code != 404 {
		t.Fatalf("pause: %d", code)
	}
}

// TestUpcoming: the next occurrences shown leave out those recorded
// already (fired early by the lead) and are at most nextOccurrences.
func TestUpcoming(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Unix(1_900_000_000+int64(s), 0) }
	for _, c := range []struct {
		last time.Time
		next []time.Time
		want []time.Time
	}{
		{time.Time{}, []time.Time{at(1), at(2), at(3), at(4)}, []time.Time{at(1), at(2), at(3)}},
		{at(0), []time.Time{at(1), at(2), at(3), at(4)}, []time.Time{at(1), at(2), at(3)}},
		{at(1), []time.Time{at(1), at(2), at(3), at(4)}, []time.Time{at(2), at(3), at(4)}},
		{at(1), []time.Time{at(1)}, []time.Time{}},
		{time.Time{}, []time.Time{}, []time.Time{}},
	} {
		got := upcoming(inspect.ScheduleInfo{LastRecorded: c.last, Next: c.next})
		if len(got) != len(c.want) {
			t.Errorf("last %v, next %v: %v, want %v", c.last, c.next, got, c.want)
			continue
		}
		for k := range got {
			if !got[k].Equal(c.want[k]) {
				t.Errorf("last %v, next %v: %v, want %v", c.last, c.next, got, c.want)
			}
		}
	}
}

// TestDeadBulk (#29): Replay all and Purge all act on every dead letter
// the filter matches, in every shard, and answer the counts; an unknown
// action is refused, and so is either without the header or in
// read-only mode.
func TestDeadBulk(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2, Queues: map[string]shard.QueuePolicy{"q": shardtest.Policy(), "other": shardtest.Policy()}})
	inQ := e.Dead("q", "dq", 5)
	inOther := e.Dead("other", "do", 3)
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in}))
	t.Cleanup(srv.Close)
	ro := httptest.NewServer(New(Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(ro.Close)
	for _, c := range []struct {
		url  string
		hdr  map[string]string
		code int
	}{
		{srv.URL + "/ui/api/deadall/replay?queue=q", nil, 403},
		{ro.URL + "/ui/api/deadall/purge", ui, 403},
		{srv.URL + "/ui/api/deadall/drop?all=1", ui, 400},
		{srv.URL + "/ui/api/deadall/purge", ui, 400},                  // no filter, no all=1
		{srv.URL + "/ui/api/deadall/purge?errors=shardtest", ui, 400}, // a misspelt key
	} {
		if code, body := do(t, "POST", c.url, c.hdr); code != c.code {
			t.Fatalf("%s: %d %s, want %d", c.url, code, body, c.code)
		}
	}
	if e.State(inQ[0]) != "dead" || e.State(inOther[0]) != "dead" {
		t.Fatal("a refused bulk action changed something")
	}
	// until leaves out what was buried since: here, everything.
	if code, body := do(t, "POST", srv.URL+"/ui/api/deadall/purge?queue=q&until=1000", ui); code != 200 || !strings.Contains(body, `"done":0`) || e.State(inQ[0]) != "dead" {
		t.Fatalf("purge until 1970: %d %s", code, body)
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/deadall/purge?queue=q&until=soon", ui); code != 400 {
		t.Fatalf("a bad until: %d %s", code, body)
	}
	// A part with no time left answers "more", having done nothing.
	short := httptest.NewServer(New(Options{Inspector: in, BulkPart: time.Nanosecond}))
	t.Cleanup(short.Close)
	if code, body := do(t, "POST", short.URL+"/ui/api/deadall/replay?queue=q", ui); code != 200 || !strings.Contains(body, `"more":true`) || e.State(inQ[0]) != "dead" {
		t.Fatalf("a part out of time: %d %s", code, body)
	}
	code, body := do(t, "POST", srv.URL+"/ui/api/deadall/replay?queue=q", ui)
	if code != 200 || !strings.Contains(body, `"done":5`) || !strings.Contains(body, `"scanned":8`) || !strings.Contains(body, `"more":false`) {
		t.Fatalf("replay all of q: %d %s", code, body)
	}
	for _, id := range inQ {
		if s := e.State(id); s != "scheduled" {
			t.Fatalf("%s after replay all: %s", id, s)
		}
	}
	if code, body := do(t, "POST", srv.URL+"/ui/api/deadall/purge?error=shardtest", ui); code != 200 || !strings.Contains(body, `"done":3`) {
		t.Fatalf("purge all: %d %s", code, body)
	}
	for _, id := range inOther {
		if s := e.State(id); s != "gone" {
			t.Fatalf("%s after purge all: %s", id, s)
		}
	}
}

// TestScheduleHistoryRoute: GET schedulehistory answers a schedule's
// outcomes as the CLI's JSON has them; a name no schedule can have is 400.
func TestScheduleHistoryRoute(t *testing.T) {
	t.Parallel()
	e := shardtest.New(t, shardtest.Options{Namespace: "ui", Shards: 2})
	in, err := inspect.New(e.RDB, inspect.Config{Namespace: "ui", Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	l := e.Layout()
	at := time.Now().Add(-time.Hour)
	if r, err := e.Store.Fire(testenv.Ctx(t, 10*time.Second), l.HomeShard("tick"), shard.FireArgs{Schedule: "tick", Occurrence: at, Epoch: 1,
		Task:   shard.EnqueueArgs{ID: l.OccurrenceID("tick", at), Queue: shardtest.Queue, MaxRetries: -1},
		Policy: &shard.PolicySkip{First: at.Add(-3 * time.Minute), Count: 4, Reason: "catch_up skip"}}); err != nil || r.Outcome != shard.SkippedPolicy {
		t.Fatalf("policy skip: %+v %v", r, err)
	}
	srv := httptest.NewServer(New(Options{Inspector: in, ReadOnly: true}))
	t.Cleanup(srv.Close)
	if code, body := do(t, "GET", srv.URL+"/ui/api/schedulehistory?name=tick", nil); code != 200 || !strings.Contains(body, `"outcome":"skipped"`) || !strings.Contains(body, `"count":4`) {
		t.Fatalf("history: %d %s", code, body)
	}
	if code, body := do(t, "GET", srv.URL+"/ui/api/schedulehistory?name=bad%20name", nil); code != 400 {
		t.Fatalf("a bad name: %d %s", code, body)
	}
}
