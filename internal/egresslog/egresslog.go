package egresslog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// Store keeps the log and the sessions it is fenced by (the store
// satisfies it).
type Store interface {
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	AppendEgressEvents(ctx context.Context, a store.EgressAppend) (int64, error)
	ListEgressEvents(ctx context.Context, q store.EgressQuery) ([]domain.EgressEvent, error)
}

// Metrics counts egress events by kind and verdict (*metrics.Registry has
// it); nil counts nothing.
type Metrics interface {
	EgressEvents(kind, verdict string, n int)
}

// Config bounds what a host may put in a session's log. Zero fields take
// the defaults.
type Config struct {
	// Rate (events a second) and Burst bound how fast a session's log
	// takes events: a token bucket per session on this replica (a host
	// posts to the replica holding its link). Default 100/s with a burst
	// of 1,000: a package install resolves and connects a few dozen times
	// a second at most. The excess is counted, not kept, and recorded as
	// one dropped event (with the host's own losses) at most once per
	// SummaryEvery.
	Rate  float64
	Burst int
	// SummaryEvery spaces a session's dropped events; default 1s.
	SummaryEvery time.Duration
	// Keep is how many events a session keeps: older ones are deleted as
	// new ones arrive. Default 10,000.
	Keep int
}

// Defaults of Config (see there why).
const (
	defaultRate         = 100
	defaultBurst        = 1000
	defaultSummaryEvery = time.Second
	defaultKeep         = 10_000
)

func (c Config) withDefaults() Config {
	if c.Rate <= 0 {
		c.Rate = defaultRate
	}
	if c.Burst <= 0 {
		c.Burst = defaultBurst
	}
	if c.SummaryEvery <= 0 {
		c.SummaryEvery = defaultSummaryEvery
	}
	if c.Keep <= 0 {
		c.Keep = defaultKeep
	}
	return c
}

// Deps are what the log needs.
type Deps struct {
	Store   Store
	Metrics Metrics // nil: nothing counted
	Logger  *slog.Logger
	Now     func() time.Time // default time.Now
}

// Log is the sessions' egress log on one replica.
type Log struct {
	cfg   Config
	st    Store
	met   Metrics
	log   *slog.Logger
	now   func() time.Time
	limit *limiter
}

// New returns the log.
func New(cfg Config, deps Deps) (*Log, error) {
	if deps.Store == nil {
		return nil, errors.New("new egress log: a Store is required")
	}
	cfg = cfg.withDefaults()
	l := &Log{cfg: cfg, st: deps.Store, met: deps.Metrics, log: deps.Logger, now: deps.Now}
	if l.log == nil {
		l.log = slog.New(slog.DiscardHandler)
	}
	if l.now == nil {
		l.now = time.Now
	}
	l.limit = newLimiter(cfg)
	return l, nil
}

// RouteHostLink adds the hosts' egress reports to the host-link mux
// (hostlink.PathEgress).
func (l *Log) RouteHostLink(mux *http.ServeMux) {
	mux.HandleFunc("POST "+hostlink.PathEgress, l.handleReport)
}

// handleReport keeps what a session's host reports of its guest's egress:
// only from the host the session is placed on, at its current epoch, while
// it has a VM; every field checked and clipped (hostlink.DecodeEgressReport);
// at most Rate events a second, the rest counted into a dropped event.
func (l *Log) handleReport(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	sid := domain.SessionID(r.PathValue("id"))
	rep, err := hostlink.DecodeEgressReport(http.MaxBytesReader(w, r.Body, hostlink.MaxEgressReportBytes))
	if err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, err.Error())
		return
	}
	s, err := l.st.GetSession(r.Context(), sid)
	if err != nil {
		l.writeErr(w, sid, hostID, err)
		return
	}
	if !s.RunsOn(hostID, rep.Epoch) {
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, fmt.Sprintf("%s; the egress report came from host %s at epoch %d",
			s.Where(), hostID, rep.Epoch))
		return
	}
	if err := l.keep(r.Context(), sid, rep); err != nil {
		l.writeErr(w, sid, hostID, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Record keeps events the coordinator decided itself on session sid's
// traffic (the credential broker's), at epoch, as a host's report is kept.
func (l *Log) Record(ctx context.Context, sid domain.SessionID, epoch int64, events []hostlink.EgressEvent) error {
	for i, e := range events {
		events[i] = e.Clipped()
	}
	return l.keep(ctx, sid, hostlink.EgressReport{Epoch: epoch, Events: events})
}

// keep counts a report and stores what the session's rate admits of it.
func (l *Log) keep(ctx context.Context, sid domain.SessionID, rep hostlink.EgressReport) error {
	l.count(rep)
	now := l.now()
	kept, dropped := l.limit.admit(sid, len(rep.Events), rep.Dropped, now)
	rows := make([]domain.EgressEvent, 0, kept+1)
	for _, e := range rep.Events[:kept] {
		rows = append(rows, row(e, now))
	}
	if dropped > 0 {
		rows = append(rows, droppedRow(dropped, now))
	}
	if len(rows) == 0 {
		return nil
	}
	_, err := l.st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sid, Epoch: rep.Epoch, Events: rows, Keep: l.cfg.Keep, At: now})
	if err != nil {
		l.limit.unsummarize(sid, dropped)
		return err
	}
	return nil
}

// count adds a report's events to the metric: each by its kind and
// verdict, those kept over the rate too (the metric counts traffic, the
// log is bounded); the events the host lost as kind dropped, verdict
// unknown.
func (l *Log) count(rep hostlink.EgressReport) {
	if l.met == nil {
		return
	}
	type key struct{ kind, verdict string }
	n := map[key]int{}
	for _, e := range rep.Events {
		n[key{e.Kind, e.Verdict}]++
	}
	for k, c := range n {
		l.met.EgressEvents(k.kind, k.verdict, c)
	}
	if rep.Dropped > 0 {
		l.met.EgressEvents(hostlink.EgressDropped, "unknown", int(min(rep.Dropped, 1<<31)))
	}
}

// row is the stored form of a host's event; a time that is not set or
// lies ahead of the coordinator's clock is the coordinator's now.
func row(e hostlink.EgressEvent, now time.Time) domain.EgressEvent {
	at := e.At
	if at.IsZero() || at.After(now) || at.Year() < 2000 {
		at = now
	}
	return domain.EgressEvent{At: at, Kind: e.Kind, Proto: e.Proto, Addr: e.Addr, Host: e.Host, Port: int(e.Port), Verdict: e.Verdict,
		BytesUp: e.BytesUp, BytesDown: e.BytesDown, Reason: e.Reason}
}

func droppedRow(n int64, now time.Time) domain.EgressEvent {
	return domain.EgressEvent{At: now, Kind: hostlink.EgressDropped, Dropped: n,
		Reason: fmt.Sprintf("%d egress events not kept: the host's queue was full or they came faster than the session's log takes", n)}
}

func (l *Log) writeErr(w http.ResponseWriter, sid domain.SessionID, hostID domain.HostID, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		hostlink.WriteError(w, http.StatusNotFound, hostlink.CodeNotFound, err.Error())
	case errors.Is(err, store.ErrStaleEpoch):
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, err.Error())
	default:
		l.log.Warn("record egress events", "session_id", sid, "host_id", hostID, "err", err)
		hostlink.WriteError(w, http.StatusServiceUnavailable, hostlink.CodeUnavailable, err.Error())
	}
}

// MaxPage is the most events one read returns.
const MaxPage = store.MaxEgressPage

// Query is one page of a session's egress log: newest first before a seq
// (0: from the newest), or, Ascending, oldest first after a seq
// (following the log). Limit is 1 to MaxPage (0: MaxPage).
type Query struct {
	Ascending bool
	After     int64
	Before    int64
	Limit     int
}

// EgressEvents reads one page of a session's egress log; ErrNotFound for
// an unknown session, domain.ErrInvalid for a query out of range.
func (l *Log) EgressEvents(ctx context.Context, sid domain.SessionID, q Query) ([]domain.EgressEvent, error) {
	if q.Limit < 0 || q.Limit > MaxPage || q.After < 0 || q.Before < 0 {
		return nil, fmt.Errorf("%w: egress page: limit %d (0 to %d), after %d and before %d (not negative)", domain.ErrInvalid, q.Limit, MaxPage, q.After, q.Before)
	}
	if _, err := l.st.GetSession(ctx, sid); err != nil {
		return nil, err
	}
	evs, err := l.st.ListEgressEvents(ctx, store.EgressQuery{SessionID: sid, Ascending: q.Ascending, After: q.After, Before: q.Before, Limit: q.Limit})
	if err != nil {
		return nil, fmt.Errorf("egress events of session %s: %w", sid, err)
	}
	return evs, nil
}
