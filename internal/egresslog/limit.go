package egresslog

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// forgetAfter is how long a session's rate state outlives its last
// report: by then its bucket is full again (Burst/Rate is 10 s by
// default) and nothing is pending.
const forgetAfter = time.Minute

// limiter keeps, in memory on this replica, each reporting session's token
// bucket and the count of events not kept since its last dropped event.
// Only sessions a host may report for (placed on it, with a VM) get a
// state, so the map is bounded by the sessions running on this replica's
// hosts.
type limiter struct {
	cfg      Config
	mu       sync.Mutex
	sessions map[domain.SessionID]*sessionRate
}

type sessionRate struct {
	bucket     *rate.Limiter
	pending    int64     // events not kept, not yet in a dropped event
	summarized time.Time // when the last dropped event was recorded
	seen       time.Time
}

func newLimiter(cfg Config) *limiter {
	return &limiter{cfg: cfg, sessions: map[domain.SessionID]*sessionRate{}}
}

// admit says how many of n reported events (the first ones) the session
// keeps at now, and the count a dropped event records with them: the
// events not kept (those over the rate and lost, lost by the host),
// pending ones included, once SummaryEvery has passed since the last (0
// meanwhile: they wait for the next report or Run's flush).
func (l *limiter) admit(sid domain.SessionID, n int, lost int64, now time.Time) (int, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sessions[sid]
	if s == nil {
		s = &sessionRate{bucket: rate.NewLimiter(rate.Limit(l.cfg.Rate), l.cfg.Burst)}
		l.sessions[sid] = s
	}
	s.seen = now
	kept := min(n, max(int(s.bucket.TokensAt(now)), 0))
	if kept > 0 {
		s.bucket.AllowN(now, kept)
	}
	s.pending += int64(n-kept) + lost
	if s.pending == 0 || now.Sub(s.summarized) < l.cfg.SummaryEvery {
		return kept, 0
	}
	dropped := s.pending
	s.pending, s.summarized = 0, now
	return kept, dropped
}

// unsummarize puts back a dropped count whose event was not stored.
func (l *limiter) unsummarize(sid domain.SessionID, n int64) {
	if n == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.sessions[sid]; s != nil {
		s.pending += n
		s.summarized = time.Time{}
	}
}

// due takes the pending counts whose SummaryEvery has passed, and forgets
// the sessions silent for forgetAfter with nothing pending.
func (l *limiter) due(now time.Time) map[domain.SessionID]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[domain.SessionID]int64{}
	for sid, s := range l.sessions {
		switch {
		case s.pending > 0 && now.Sub(s.summarized) >= l.cfg.SummaryEvery:
			out[sid] = s.pending
			s.pending, s.summarized = 0, now
		case s.pending == 0 && now.Sub(s.seen) >= forgetAfter:
			delete(l.sessions, sid)
		}
	}
	return out
}

// Run records, every SummaryEvery until ctx ends, the dropped events of
// sessions whose hosts stopped reporting while some were pending, and
// forgets the sessions that are quiet. It returns nil when ctx ends.
func (l *Log) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.SummaryEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			l.flush(ctx)
		}
	}
}

// flush records the due dropped events. They were counted from reports
// the fence took, so they are appended unfenced; a session gone since is
// skipped, another failure puts the count back for the next flush.
func (l *Log) flush(ctx context.Context) {
	now := l.now()
	for sid, n := range l.limit.due(now) {
		_, err := l.st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sid, Events: []domain.EgressEvent{droppedRow(n, now)}, Keep: l.cfg.Keep, At: now})
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound):
		case ctx.Err() != nil:
			return
		default:
			l.limit.unsummarize(sid, n)
			l.log.Warn("record dropped egress events", "session_id", sid, "dropped", n, "err", err)
		}
	}
}
