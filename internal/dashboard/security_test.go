package dashboard

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/hourglass-sched/hourglass/inspect"
	"github.com/hourglass-sched/hourglass/internal/testenv"
)

// send sends a request and returns the response, its body read and
// closed.
func send(t *testing.T, method, url string, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(testenv.Ctx(t, 10*time.Second), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	if u, p, ok := strings.Cut(hdr["Authorization-Basic"], ":"); ok {
		req.Header.Del("Authorization-Basic")
		req.SetBasicAuth(u, p)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestSecurityHeaders: every response under /ui/ (the page, its assets,
// API reads and changes, errors, refusals and auth challenges) forbids
// framing (CSP frame-ancestors 'none' and X-Frame-Options DENY), sets a
// strict CSP without inline script or style, nosniff, no Referer and a
// same-origin resource policy.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, Options{})
	authSrv, _ := newServer(t, Options{Username: "ops", Password: "s3cret"})
	for _, c := range []struct {
		method, url string
		hdr         map[string]string
		code        int
	}{
		{"GET", srv.URL + "/ui/", nil, 200},
		{"GET", srv.URL + "/ui/app.js", nil, 200},
		{"GET", srv.URL + "/ui/style.css", nil, 200},
		{"GET", srv.URL + "/ui/api/queues", nil, 200},
		{"GET", srv.URL + "/ui/api/nope", nil, 404},
		{"POST", srv.URL + "/ui/api/queues/q/pause", ui, 200},
		{"POST", srv.URL + "/ui/api/queues/q/resume", nil, 403},
		{"GET", srv.URL + "/ui/", map[string]string{"Host": "evil.example"}, 403},
		{"GET", authSrv.URL + "/ui/", nil, 401},
		{"GET", authSrv.URL + "/ui/", map[string]string{"Authorization-Basic": "ops:s3cret"}, 200},
	} {
		resp := send(t, c.method, c.url, c.hdr)
		h := resp.Header
		csp := h.Get("Content-Security-Policy")
		if resp.StatusCode != c.code || !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "default-src 'self'") ||
			strings.Contains(csp, "unsafe-") || h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" ||
			h.Get("Referrer-Policy") != "no-referrer" || h.Get("Cross-Origin-Resource-Policy") != "same-origin" {
			t.Errorf("%s %s %v: %d, headers %v", c.method, c.url, c.hdr, resp.StatusCode, h)
		}
	}
}

// TestPageNeedsNoInlineCode: the page's HTML carries no inline script,
// style or event handler, so the strict CSP leaves it working.
func TestPageNeedsNoInlineCode(t *testing.T) {
	t.Parallel()
	page, err := assets.ReadFile("assets/index.html")
	if err != nil {
		t.Fatal(err)
	}
	html := strings.ToLower(string(page))
	for _, bad := range []string{"<style", " style=", " onclick=", " onsubmit=", " onload=", "javascript:"} {
		if strings.Contains(html, bad) {
			t.Errorf("index.html has %q", bad)
		}
	}
	if strings.Count(html, "<script") != strings.Count(html, "<script src=") {
		t.Error("index.html has an inline <script>")
	}
}

// TestChangesCheckOrigin: a change whose Origin is neither the
// dashboard's host nor an allowed one is refused even with the
// X-Hourglass-UI header (a page elsewhere, or a client that forges the
// header, says where it comes from); without Origin (curl, scripts) the
// header is enough, as before.
func TestChangesCheckOrigin(t *testing.T) {
	t.Parallel()
	srv, in := newServer(t, Options{AllowedHosts: []string{"hg.example.com"}})
	own := "http://" + strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		origin string
		want   int
	}{
		{"http://evil.example", 403},
		{"http://evil.example:" + srv.URL[strings.LastIndexByte(srv.URL, ':')+1:], 403},
		{"null", 403},
		{"http://127.0.0.2" + srv.URL[strings.LastIndexByte(srv.URL, ':'):], 403},
		{"", 200},
		{own, 200},
		{"https://hg.example.com", 200},
	} {
		hdr := map[string]string{CSRFHeader: "1"}
		if c.origin != "" {
			hdr["Origin"] = c.origin
		}
		code, body := do(t, "POST", srv.URL+"/ui/api/queues/q/pause", hdr)
		if code != c.want {
			t.Errorf("Origin %q: %d %s, want %d", c.origin, code, body, c.want)
		}
		if c.want == 403 {
			if q, err := in.Queue(testenv.Ctx(t, 10*time.Second), "q"); err != nil || q.State != inspect.QueueActive {
				t.Fatalf("paused by a request from Origin %q: %+v %v", c.origin, q, err)
			}
		} else if code, _ := do(t, "POST", srv.URL+"/ui/api/queues/q/resume", ui); code != 200 {
			t.Fatalf("resume: %d", code)
		}
	}
}

// TestAuthFailuresAreLoggedAndSlowed: wrong credentials are logged with
// the client's address and never with the credentials; after
// freeFailures of them in a row the client is refused (429, Retry-After)
// even with the right ones, until the delay passed; then the right ones
// work and clear its record. A request without credentials is a
// challenge, not a failure.
func TestAuthFailuresAreLoggedAndSlowed(t *testing.T) {
	t.Parallel()
	logs := &testenv.Buffer{}
	const user, pass, guess = "ops-user", "s3cret-pass", "guess-Pw0rd"
	srv, _ := newServer(t, Options{Username: user, Password: pass,
		Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Debug})})
	for range 3 {
		if code, _ := do(t, "GET", srv.URL+"/ui/api/queues", nil); code != 401 {
			t.Fatalf("no credentials: %d", code)
		}
	}
	for i := range freeFailures {
		if code, _ := do(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"auth": user + ":" + guess}); code != 401 {
			t.Fatalf("failure %d: %d", i+1, code)
		}
	}
	if code, _ := do(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"auth": user + ":" + pass}); code != 200 {
		t.Fatalf("the right credentials after %d failures: %d", freeFailures, code)
	}
	for i := range freeFailures + 1 {
		if code, _ := do(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"auth": "root:" + guess}); code != 401 {
			t.Fatalf("failure %d after a success: %d", i+1, code)
		}
	}
	resp := send(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"Authorization-Basic": user + ":" + pass})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("the right credentials while refused: %d, Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	testenv.WaitFor(t, 10*time.Second, "the refusal to end", func() (bool, string) {
		code, body := do(t, "GET", srv.URL+"/ui/api/queues", map[string]string{"auth": user + ":" + pass})
		return code == 200, fmt.Sprint(code, body)
	})
	out := logs.String()
	if n := strings.Count(out, "dashboard auth failed"); n != 2*freeFailures+1 {
		t.Errorf("%d failures logged, want %d:\n%s", n, 2*freeFailures+1, out)
	}
	if !strings.Contains(out, "remote=127.0.0.1:") || !strings.Contains(out, "refused_for=1s") {
		t.Errorf("the log does not name the client and the refusal:\n%s", out)
	}
	for _, secret := range []string{user, pass, guess, "root"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
}

// TestFailuresAreBounded: the refusal starts after freeFailures, doubles
// with each failure up to maxLock, ends with a success or after
// forgetAfter; an IPv6 client is its /64; the table never holds more
// than its bound, dropping the client whose last failure is the oldest.
func TestFailuresAreBounded(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_900_000_000, 0)
	f := newFailures()
	f.now = func() time.Time { return now }
	a := client("192.0.2.1:5000")
	var locks []time.Duration
	for range freeFailures + 8 {
		_, lock := f.fail(a)
		locks = append(locks, lock)
	}
	want := []time.Duration{0, 0, 0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, maxLock, maxLock}
	if fmt.Sprint(locks) != fmt.Sprint(want) {
		t.Fatalf("locks %v, want %v", locks, want)
	}
	if got := f.locked(a); got != maxLock {
		t.Fatalf("locked %v", got)
	}
	now = now.Add(maxLock)
	if got := f.locked(a); got != 0 {
		t.Fatalf("locked %v after the delay", got)
	}
	f.succeed(a)
	if n, lock := f.fail(a); n != 1 || lock != 0 {
		t.Fatalf("after a success: failure %d, lock %v", n, lock)
	}
	now = now.Add(forgetAfter + time.Second)
	if n, _ := f.fail(a); n != 1 {
		t.Fatalf("after forgetAfter: failure %d", n)
	}
	if client("[2001:db8:1:2::5]:80") != client("[2001:db8:1:2:ffff::1]:81") || client("[2001:db8:1:2::5]:80") == client("[2001:db8:1:3::5]:80") {
		t.Fatal("an IPv6 client is not its /64")
	}
	if client("[::ffff:192.0.2.1]:1") != a {
		t.Fatal("an IPv4-mapped address is not its IPv4 client")
	}

	f = newFailures()
	f.max = 16
	f.now = func() time.Time { return now }
	for i := range 100 {
		now = now.Add(time.Millisecond)
		f.fail(client(fmt.Sprintf("198.51.100.%d:1", i)))
		if f.size() > f.max {
			t.Fatalf("%d clients tracked, bound %d", f.size(), f.max)
		}
	}
	if f.locked(client("198.51.100.99:1")) != 0 || f.size() != f.max {
		t.Fatalf("%d clients tracked", f.size())
	}
	if _, ok := f.clients[client("198.51.100.83:1")]; ok {
		t.Fatal("the oldest client was kept")
	}
	if _, ok := f.clients[client("198.51.100.84:1")]; !ok {
		t.Fatal("a recent client was dropped")
	}
}
