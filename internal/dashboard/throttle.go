package dashboard

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// Repeated basic-auth failures from one client are slowed down: after
// freeFailures wrong credentials, the client is refused (429, without
// its credentials being checked) for a delay that starts at firstLock and
// doubles with each further failure, up to maxLock. A success clears the
// client's record; so does forgetAfter without a failure. At most
// maxClients clients are tracked: when the table is full, the client
// whose last failure is the oldest is dropped, so memory stays bounded
// whatever an attacker sends.
const (
	freeFailures = 5
	firstLock    = time.Second
	maxLock      = time.Minute
	forgetAfter  = 10 * time.Minute
	maxClients   = 4096
)

// failures tracks recent auth failures per client. Safe for concurrent
// use.
type failures struct {
	now func() time.Time // the clock (tests inject one)
	max int              // clients tracked at most

	mu      sync.Mutex
	clients map[netip.Prefix]*failed
}

// failed is one client's record.
type failed struct {
	count int       // failures since the last success (or since forgotten)
	last  time.Time // the last failure
	until time.Time // refused until then
}

func newFailures() *failures {
	return &failures{now: time.Now, max: maxClients, clients: map[netip.Prefix]*failed{}}
}

// client is the key of a request's remote address: its IPv4 address, or
// its IPv6 /64 (one host usually holds a whole /64).
func client(remoteAddr string) netip.Prefix {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{} // one bucket for whatever cannot be parsed
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return netip.PrefixFrom(ip, 32)
	}
	p, _ := ip.Prefix(64)
	return p
}

// locked returns how long c is still refused (0: not refused).
func (f *failures) locked(c netip.Prefix) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.clients[c]
	if e == nil {
		return 0
	}
	return max(e.until.Sub(f.now()), 0)
}

// fail records a failure of c and returns c's failures in a row and how
// long c is refused now (0 while it has failures to spare).
func (f *failures) fail(c netip.Prefix) (int, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	e := f.clients[c]
	if e != nil && now.Sub(e.last) > forgetAfter {
		e = nil
	}
	if e == nil {
		f.makeRoom(now)
		e = &failed{}
		f.clients[c] = e
	}
	e.count++
	e.last = now
	if e.count <= freeFailures {
		return e.count, 0
	}
	lock := maxLock
	if n := e.count - freeFailures - 1; n < 6 { // 1s << 6 > maxLock
		lock = min(firstLock<<n, maxLock)
	}
	e.until = now.Add(lock)
	return e.count, lock
}

// succeed clears c's record.
func (f *failures) succeed(c netip.Prefix) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.clients, c)
}

// makeRoom makes room for one more client: it drops the records
// forgotten by now, and if the table is still full, the one whose last
// failure is the oldest. Called with mu held.
func (f *failures) makeRoom(now time.Time) {
	if len(f.clients) < f.max {
		return
	}
	var oldest netip.Prefix
	var at time.Time
	for c, e := range f.clients {
		if now.Sub(e.last) > forgetAfter && !now.Before(e.until) {
			delete(f.clients, c)
			continue
		}
		if at.IsZero() || e.last.Before(at) {
			oldest, at = c, e.last
		}
	}
	if len(f.clients) >= f.max {
		delete(f.clients, oldest)
	}
}

// size returns the number of clients tracked.
func (f *failures) size() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.clients)
}
