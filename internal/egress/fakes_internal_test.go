package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeNames allows the names it holds, on the ports listed (any port
// when none are).
type fakeNames struct {
	allowed map[string][]uint16
	mu      sync.Mutex
	asked   []string
}

func (f *fakeNames) AllowName(name string, port uint16) (bool, string) {
	f.mu.Lock()
	f.asked = append(f.asked, joinHostPort(name, port))
	f.mu.Unlock()
	ports, ok := f.allowed[name]
	switch {
	case !ok:
		return false, name + " is not in the allowlist"
	case port == AnyPort || len(ports) == 0 || slices.Contains(ports, port):
		return true, "allowed by " + name
	}
	return false, fmt.Sprintf("port %d of %s is not allowed", port, name)
}

// fakeUpstream answers from a table and records every name it is asked.
type fakeUpstream struct {
	addrs map[string][]netip.Addr // by rooted name
	mu    sync.Mutex
	asked []string
}

func (f *fakeUpstream) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	f.asked = append(f.asked, host)
	as, ok := f.addrs[host]
	f.mu.Unlock()
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range as {
		if a.Is4() == (network == "ip4") {
			out = append(out, a)
		}
	}
	return out, nil
}

// set makes host's answer addrs.
func (f *fakeUpstream) set(host string, addrs ...netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[host] = addrs
}

func (f *fakeUpstream) names() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.asked)
}

// fakeAddrs blocks loopback, private and link-local addresses.
type fakeAddrs struct{}

func (fakeAddrs) CheckAddr(ap netip.AddrPort) error {
	if ap.Port() == 0 {
		return fmt.Errorf("%s: no port", ap) // as netpolicy.Guard
	}
	a := ap.Addr()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified() {
		return fmt.Errorf("%s is blocked", a)
	}
	return nil
}

// fakeDialer dials the names it maps to a real (loopback) address and
// records every address it was asked for.
type fakeDialer struct {
	routes map[string]string // "name:port" → "127.0.0.1:port"
	mu     sync.Mutex
	dialed []string
}

func (f *fakeDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	f.mu.Lock()
	f.dialed = append(f.dialed, addr)
	f.mu.Unlock()
	to, ok := f.routes[addr]
	if !ok {
		return nil, fmt.Errorf("fake dialer: no route to %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

func (f *fakeDialer) dials() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.dialed)
}

// recorder is a Sink keeping every event.
type recorder struct {
	mu     sync.Mutex
	events []Event
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) Record(_ context.Context, ev Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// waitFor waits (at most 5 s) for an event match accepts.
func (r *recorder) waitFor(t *testing.T, what string, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		for _, ev := range r.all() {
			if match(ev) {
				return ev
			}
		}
		select {
		case <-r.notify:
		case <-deadline:
			t.Fatalf("no event %s; got %+v", what, r.all())
		}
	}
}

// runEvents runs an event queue into a recorder for the test's duration.
func runEvents(t testing.TB) (*Events, *recorder) {
	t.Helper()
	rec := newRecorder()
	ev := NewEvents(EventsConfig{}, EventsDeps{Sink: rec})
	runBackground(t, ev.Run)
	return ev, rec
}

// runBackground runs run until the test ends, then stops and joins it.
func runBackground(t testing.TB, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
}
