package egress

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// Kind says what an Event is about.
type Kind string

// The kinds of events.
const (
	KindDNS     Kind = "dns"     // one query
	KindTCP     Kind = "tcp"     // a connection that was neither TLS nor HTTP, or refused before it said; a dropped TCP flow (IPv6)
	KindHTTP    Kind = "http"    // a plain HTTP connection (transparent or absolute-form proxy request)
	KindConnect Kind = "connect" // an HTTP CONNECT tunnel
	KindTLS     Kind = "tls"     // a TLS connection passed through by its SNI
	KindUDP     Kind = "udp"     // a UDP flow the machine's network dropped
	KindICMP    Kind = "icmp"    // an ICMP or ICMPv6 flow the machine's network dropped
	KindIP      Kind = "ip"      // a flow of another IP protocol the machine's network dropped
	KindDropped Kind = "dropped" // a summary: Dropped events were not kept (over the rate, or the queue was full)
)

// Verdict is what was decided.
type Verdict string

// The verdicts.
const (
	Allow Verdict = "allow"
	Deny  Verdict = "deny"
)

// Event is one DNS query or one connection, as it can be stored as a
// session event. Host and Reason may quote the guest; they are clipped to
// maxEventText bytes of valid UTF-8.
type Event struct {
	Time      time.Time `json:"time"`
	Kind      Kind      `json:"kind"`
	Proto     string    `json:"proto,omitempty"` // tcp, udp, icmp, icmpv6, ...
	Addr      string    `json:"addr,omitempty"`  // the destination address the guest dialled, when known
	Host      string    `json:"host,omitempty"`  // the name the guest claimed, as it sent it
	Port      uint16    `json:"port,omitempty"`
	Verdict   Verdict   `json:"verdict,omitempty"`
	BytesUp   int64     `json:"bytes_up,omitempty"`   // guest → upstream
	BytesDown int64     `json:"bytes_down,omitempty"` // upstream → guest
	Reason    string    `json:"reason,omitempty"`
	Dropped   int64     `json:"dropped,omitempty"` // KindDropped only
}

// maxEventText bounds Host and Reason (256 bytes).
const maxEventText = 256

// Sink takes the events (the host's session event relay). Record may
// block; only Events.Run calls it, one event at a time.
type Sink interface {
	Record(ctx context.Context, ev Event)
}

// Metrics counts what a machine's egress path refused or dropped, by
// kind, where it happened: before the rate limit (*metrics.Registry has
// it).
type Metrics interface {
	EgressDenied(kind string)
}

// EventsConfig bounds one machine's events; zero fields take the
// defaults.
type EventsConfig struct {
	// Queue is how many events wait for the sink (DefaultEventQueue).
	Queue int
	// DenyBurst and DenyRate bound the refusals and drops of each kind
	// the queue takes: DenyBurst at once, then DenyRate a second (100
	// and 10/s). A guest hammering what it may not reach (a ping flood,
	// UDP to every port) makes a bounded number of events; the rest are
	// counted as dropped, as a full queue's are. Allowed events are not
	// limited here (the proxy's bounds hold them).
	DenyBurst int
	DenyRate  float64
}

// Defaults of EventsConfig.
const (
	DefaultEventQueue = 1024
	DefaultDenyBurst  = 100
	DefaultDenyRate   = 10
)

func (c EventsConfig) withDefaults() EventsConfig {
	if c.Queue <= 0 {
		c.Queue = DefaultEventQueue
	}
	if c.DenyBurst <= 0 {
		c.DenyBurst = DefaultDenyBurst
	}
	if c.DenyRate <= 0 {
		c.DenyRate = DefaultDenyRate
	}
	return c
}

// EventsDeps are where the events go and what counts them.
type EventsDeps struct {
	Sink    Sink
	Metrics Metrics // nil: nothing counted
}

// Events is a bounded queue in front of a Sink: Emit never blocks, an
// event that finds the queue full, or a refusal over its kind's rate, is
// dropped and counted, and the count reaches the sink as a KindDropped
// summary. A nil *Events discards.
type Events struct {
	cfg     EventsConfig
	q       chan Event
	sink    Sink
	met     Metrics
	now     func() time.Time
	dropped atomic.Int64

	mu     sync.Mutex
	denies map[Kind]*rate.Limiter // one bucket per kind, made on its first refusal
}

// summaryEvery is how often a summary is sent while the queue stays busy.
const summaryEvery = time.Second

// NewEvents returns a queue in front of deps.Sink.
func NewEvents(cfg EventsConfig, deps EventsDeps) *Events {
	cfg = cfg.withDefaults()
	return &Events{cfg: cfg, q: make(chan Event, cfg.Queue), sink: deps.Sink, met: deps.Metrics, now: time.Now, denies: map[Kind]*rate.Limiter{}}
}

// Emit queues ev (stamped with the time if it has none), or counts it
// as dropped when the queue is full.
func (e *Events) Emit(ev Event) {
	if e == nil {
		return
	}
	if ev.Time.IsZero() {
		ev.Time = e.now()
	}
	if ev.Verdict == Deny && !e.admitDenial(ev) {
		e.dropped.Add(1)
		return
	}
	ev.Host = clip(ev.Host)
	ev.Reason = clip(ev.Reason)
	select {
	case e.q <- ev:
	default:
		e.dropped.Add(1)
	}
}

// admitDenial counts a refusal or drop and says whether its kind's bucket
// has room for its event.
func (e *Events) admitDenial(ev Event) bool {
	if e.met != nil {
		e.met.EgressDenied(string(ev.Kind))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.denies[ev.Kind]
	if b == nil {
		b = rate.NewLimiter(rate.Limit(e.cfg.DenyRate), e.cfg.DenyBurst)
		e.denies[ev.Kind] = b // kinds are the package's constants: the map stays small
	}
	return b.AllowN(e.now(), 1)
}

// AddDropped counts n events that never reached the queue (packets the
// kernel could not hand over) into the dropped summary.
func (e *Events) AddDropped(n int64) {
	if e != nil && n > 0 {
		e.dropped.Add(n)
	}
}

// Dropped is how many events were dropped so far.
func (e *Events) Dropped() int64 {
	if e == nil {
		return 0
	}
	return e.dropped.Load()
}

// Run delivers queued events to the sink until ctx ends, then delivers
// what is still queued (for at most a second) and the last summary. A
// summary of what was dropped follows the events, at most once a second
// while they keep coming, and within a second when none come.
func (e *Events) Run(ctx context.Context) error {
	tick := time.NewTicker(summaryEvery)
	defer tick.Stop()
	var reported int64
	last := e.now()
	summarize := func(ctx context.Context, force bool) {
		n := e.dropped.Load() - reported
		if n == 0 || (!force && len(e.q) > 0 && e.now().Sub(last) < summaryEvery) {
			return
		}
		reported += n
		last = e.now()
		e.sink.Record(ctx, Event{Time: last, Kind: KindDropped, Dropped: n,
			Reason: fmt.Sprintf("%d egress events dropped: refusals over %g a second of a kind, or the queue of %d was full", n, e.cfg.DenyRate, cap(e.q))})
	}
	for {
		select {
		case ev := <-e.q:
			e.sink.Record(ctx, ev)
			summarize(ctx, false)
		case <-tick.C:
			summarize(ctx, false)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
		drain:
			for dctx.Err() == nil {
				select {
				case ev := <-e.q:
					e.sink.Record(dctx, ev)
				default:
					break drain
				}
			}
			summarize(dctx, true)
			return nil
		}
	}
}

// clip makes s valid UTF-8 of at most maxEventText bytes.
func clip(s string) string {
	if len(s) <= maxEventText && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxEventText {
		return s
	}
	cut := maxEventText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
