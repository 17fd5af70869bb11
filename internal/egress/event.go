package egress

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Kind says what an Event is about.
type Kind string

// The kinds of events.
const (
	KindDNS     Kind = "dns"     // one query
	KindTCP     Kind = "tcp"     // a connection that was neither TLS nor HTTP, or refused before it said
	KindHTTP    Kind = "http"    // a plain HTTP connection (transparent or absolute-form proxy request)
	KindConnect Kind = "connect" // an HTTP CONNECT tunnel
	KindTLS     Kind = "tls"     // a TLS connection passed through by its SNI
	KindDropped Kind = "dropped" // a summary: Dropped events were lost because the queue was full
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
	Host      string    `json:"host,omitempty"`
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

// Events is a bounded queue in front of a Sink: Emit never blocks, an
// event that finds the queue full is dropped and counted, and the count
// reaches the sink as a KindDropped summary. A nil *Events discards.
type Events struct {
	q       chan Event
	sink    Sink
	now     func() time.Time
	dropped atomic.Int64
}

// DefaultEventQueue is the queue length NewEvents takes for size <= 0.
const DefaultEventQueue = 1024

// summaryEvery is how often a summary is sent while the queue stays busy.
const summaryEvery = time.Second

// NewEvents returns a queue of size events in front of sink.
func NewEvents(size int, sink Sink) *Events {
	if size <= 0 {
		size = DefaultEventQueue
	}
	return &Events{q: make(chan Event, size), sink: sink, now: time.Now}
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
	ev.Host = clip(ev.Host)
	ev.Reason = clip(ev.Reason)
	select {
	case e.q <- ev:
	default:
		e.dropped.Add(1)
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
// what is still queued (for at most a second) and the last summary.
func (e *Events) Run(ctx context.Context) error {
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
			Reason: fmt.Sprintf("%d egress events dropped: the queue of %d was full", n, cap(e.q))})
	}
	for {
		select {
		case ev := <-e.q:
			e.sink.Record(ctx, ev)
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
