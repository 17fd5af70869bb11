package coordinator

import (
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Bounds of reportLimiter: a host (which may be compromised) records at
// most one guest-bound event per session and bound a minute, whatever it
// sends; what it sends meanwhile is counted into the next one's repeated.
const (
	reportEvery      = time.Minute
	maxReportTracked = 16 << 10 // keys held; past it, reports are dropped until old keys expire
)

type reportKey struct {
	session domain.SessionID
	bound   string
}

type reportSeen struct {
	at      time.Time
	skipped int // reports held back since at, with the repeats they carried
}

// reportLimiter lets through one report per key and reportEvery.
type reportLimiter struct {
	mu   sync.Mutex
	seen map[reportKey]reportSeen
}

func newReportLimiter() *reportLimiter { return &reportLimiter{seen: make(map[reportKey]reportSeen)} }

// admit reports whether a report of k, which carries repeated repeats, is
// recorded at now, and with how many repeats in all (those held back since
// the last recorded one included).
func (l *reportLimiter) admit(k reportKey, repeated int, now time.Time) (bool, int) {
	repeated = max(repeated, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.seen[k]
	if ok && now.Sub(s.at) < reportEvery {
		s.skipped += 1 + repeated
		l.seen[k] = s
		return false, 0
	}
	if !ok && len(l.seen) >= maxReportTracked {
		l.expire(now)
		if len(l.seen) >= maxReportTracked {
			return false, 0
		}
	}
	l.seen[k] = reportSeen{at: now}
	return true, repeated + s.skipped
}

func (l *reportLimiter) expire(now time.Time) {
	for k, s := range l.seen {
		if now.Sub(s.at) >= reportEvery {
			delete(l.seen, k)
		}
	}
}
