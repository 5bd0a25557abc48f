package dashboard

import (
	"net/http"
	"strings"
	"testing"
	"time"

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
