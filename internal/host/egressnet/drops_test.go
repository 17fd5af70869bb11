package egressnet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/egress"
	"github.com/engrams/engrams/internal/vmm/vmnet"
)

// eventSink keeps what reaches it.
type eventSink struct {
	mu     sync.Mutex
	events []egress.Event
}

func (s *eventSink) Record(_ context.Context, ev egress.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
}

func (s *eventSink) all() []egress.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]egress.Event(nil), s.events...)
}

// runQueue runs an event queue into a sink until stop, which joins it.
func runQueue() (events *egress.Events, sink *eventSink, stop func()) {
	sink = &eventSink{}
	events = egress.NewEvents(egress.EventsConfig{}, egress.EventsDeps{Sink: sink})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- events.Run(ctx) }()
	return events, sink, func() { cancel(); <-done }
}

var (
	guest  = netip.MustParseAddr("10.0.2.15")
	guest6 = netip.MustParseAddr("2001:db8:1::2")
	doc6   = netip.MustParseAddr("2001:db8::1")
)

func ping(dst string, id uint16) vmnet.Drop {
	return vmnet.Drop{Proto: 1, Src: guest, Dst: netip.MustParseAddr(dst), ICMPType: 8, ICMPID: id}
}

func TestDropEvent(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	ns := vmnet.Drop{Proto: 58, Src: guest6, Dst: netip.MustParseAddr("ff02::1:ff00:1"), ICMPType: 135, Target: doc6}
	tests := []struct {
		name   string
		d      vmnet.Drop
		want   string // kind proto addr port
		reason string
	}{
		{"ping", ping("1.1.1.1", 7), "icmp icmp 1.1.1.1 0", "ICMP echo request: no ICMP leaves the machine"},
		{"NTP", vmnet.Drop{Proto: 17, Src: guest, Dst: netip.MustParseAddr("1.2.3.4"), SrcPort: 40000, DstPort: 123}, "udp udp 1.2.3.4 123", "UDP to port 123: only DNS"},
		{"QUIC", vmnet.Drop{Proto: 17, Src: guest, Dst: netip.MustParseAddr("1.2.3.4"), SrcPort: 40000, DstPort: 443}, "udp udp 1.2.3.4 443", "UDP to port 443"},
		{"GRE", vmnet.Drop{Proto: 47, Src: guest, Dst: netip.MustParseAddr("1.2.3.4")}, "ip gre 1.2.3.4 0", "IP protocol gre: only TCP and DNS"},
		{"an unnamed protocol", vmnet.Drop{Proto: 253, Src: guest, Dst: netip.MustParseAddr("1.2.3.4")}, "ip 253 1.2.3.4 0", "IP protocol 253"},
		{"a later UDP fragment", vmnet.Drop{Proto: 17, Src: guest, Dst: netip.MustParseAddr("1.2.3.4"), Fragment: true}, "udp udp 1.2.3.4 0", "a fragment after the first"},
		{"TCP over IPv6", vmnet.Drop{Proto: 6, Src: guest6, Dst: doc6, SrcPort: 40000, DstPort: 443}, "tcp tcp 2001:db8::1 443", "IPv6 tcp from 2001:db8:1::2: the machine has no IPv6"},
		{"UDP over IPv6", vmnet.Drop{Proto: 17, Src: guest6, Dst: doc6, SrcPort: 40000, DstPort: 53}, "udp udp 2001:db8::1 53", "IPv6 udp"},
		{"ping over IPv6", vmnet.Drop{Proto: 58, Src: guest6, Dst: doc6, ICMPType: 128, ICMPID: 3}, "icmp icmpv6 2001:db8::1 0", "IPv6 ICMPv6 echo request"},
		{"a neighbour solicitation", ns, "icmp icmpv6 2001:db8::1 0", "IPv6 neighbour solicitation for 2001:db8::1 (from 2001:db8:1::2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := dropEvent(tt.d, at)
			got := fmt.Sprintf("%s %s %s %d", ev.Kind, ev.Proto, ev.Addr, ev.Port)
			if got != tt.want || ev.Verdict != egress.Deny || !ev.Time.Equal(at) || ev.Host != "" || !strings.Contains(ev.Reason, tt.reason) {
				t.Errorf("event %+v (%s), want %s with a reason saying %q", ev, got, tt.want, tt.reason)
			}
		})
	}
}

// TestDropRecorderOneEventPerFlow: a flow's packets make one event while
// they keep coming less than flowMemory apart, and another once it was
// quiet that long; other flows have their own; the link's own IPv6
// housekeeping makes none.
func TestDropRecorderOneEventPerFlow(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		events, sink, stop := runQueue()
		r := newDropRecorder(events)
		for range 30 { // ping -c 30: one echo a second, one flow
			r.packet(ping("1.1.1.1", 7))
			time.Sleep(time.Second)
		}
		r.packet(ping("1.1.1.1", 8)) // another ping process
		r.packet(ping("1.1.1.2", 7)) // another address
		ntp := vmnet.Drop{Proto: 17, Src: guest, Dst: netip.MustParseAddr("1.2.3.4"), SrcPort: 40000, DstPort: 123}
		r.packet(ntp)
		r.packet(ntp)
		time.Sleep(flowMemory)
		r.packet(ntp) // quiet for flowMemory: a new event
		for _, hk := range []vmnet.Drop{
			{Proto: 58, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::2"), ICMPType: 133},                 // router solicitation
			{Proto: 58, Src: netip.IPv6Unspecified(), Dst: netip.MustParseAddr("ff02::1:ff00:2"), ICMPType: 135, Target: guest6}, // duplicate address detection
			{Proto: 58, Src: netip.MustParseAddr("fe80::1"), Dst: netip.MustParseAddr("ff02::16"), ICMPType: 143},                // MLDv2 report
		} {
			r.packet(hk)
		}
		ns := vmnet.Drop{Proto: 58, Src: guest6, Dst: netip.MustParseAddr("ff02::1:ff00:1"), ICMPType: 135, Target: doc6}
		r.packet(ns)
		ns.Src = netip.MustParseAddr("fe80::1") // the same question from another source address
		r.packet(ns)
		synctest.Wait()
		stop()
		var got []string
		for _, ev := range sink.all() {
			got = append(got, fmt.Sprintf("%s %s %d", ev.Kind, ev.Addr, ev.Port))
		}
		want := []string{"icmp 1.1.1.1 0", "icmp 1.1.1.1 0", "icmp 1.1.1.2 0", "udp 1.2.3.4 123", "udp 1.2.3.4 123", "icmp 2001:db8::1 0"}
		if strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("events %q, want %q", got, want)
		}
	})
}

// TestDropRecorderBounded: a flood of distinct flows (a ping to every
// address of a /16) keeps at most maxFlows in memory and makes a bounded
// number of events, the rest counted as dropped.
func TestDropRecorderBounded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		events, sink, stop := runQueue()
		r := newDropRecorder(events)
		const n = 1 << 16
		for i := range n {
			r.packet(ping(fmt.Sprintf("100.%d.%d.1", i>>8, i&0xff), 1))
			if len(r.flows) > maxFlows {
				t.Fatalf("%d flows remembered, at most %d", len(r.flows), maxFlows)
			}
		}
		synctest.Wait()
		stop()
		var kept, dropped int64
		for _, ev := range sink.all() {
			if ev.Kind == egress.KindDropped {
				dropped += ev.Dropped
			} else {
				kept++
			}
		}
		if kept != egress.DefaultDenyBurst || kept+dropped != n {
			t.Errorf("%d events kept and %d counted dropped, want the burst of %d kept and all %d accounted for", kept, dropped, egress.DefaultDenyBurst, n)
		}
	})
}

// fakeDropLog hands out batches, then blocks until closed.
type fakeDropLog struct {
	batches chan []vmnet.Drop
	lost    int64
	closed  chan struct{}
	once    sync.Once
}

func (f *fakeDropLog) Read() ([]vmnet.Drop, int64, error) {
	select {
	case b := <-f.batches:
		lost := f.lost
		f.lost = 0
		return b, lost, nil
	case <-f.closed:
		return nil, 0, errors.New("closed")
	}
}

func (f *fakeDropLog) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// TestRunDrops: what the log reads becomes events, what the kernel lost
// is counted as dropped, and the end of ctx closes the log and ends the
// loop without an error.
func TestRunDrops(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		events, sink, stopQueue := runQueue()
		dl := &fakeDropLog{batches: make(chan []vmnet.Drop, 1), lost: 5, closed: make(chan struct{})}
		dl.batches <- []vmnet.Drop{ping("1.1.1.1", 1), ping("1.1.1.1", 1)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- runDrops(ctx, dl, newDropRecorder(events)) }()
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runDrops ended with %v", err)
		}
		stopQueue()
		var kept, dropped int64
		for _, ev := range sink.all() {
			kept += int64(min(1, len(ev.Addr)))
			dropped += ev.Dropped
		}
		if kept != 1 || dropped != 5 {
			t.Errorf("%d events and %d dropped, want the one ping and the 5 lost", kept, dropped)
		}
	})
}
