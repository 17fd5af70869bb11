package coordinator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// maxGuestBoundBody bounds one hostlink.GuestBoundReport (bytes).
const maxGuestBoundBody = 16 << 10

// handleGuestBound appends a host's report that a stream of a session's
// guest exceeded one of the host's bounds to the session's event log
// (hostlink.EventGuestBound), so `engrams session logs` says which bound,
// its value and what the guest sent. Only the host the session is placed
// on may report, at the session's current epoch, and at most once a minute
// per bound (reportLimiter).
func (c *linkHandlers) handleGuestBound(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	sid := domain.SessionID(r.PathValue("id"))
	var req hostlink.GuestBoundReport
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxGuestBoundBody)).Decode(&req); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode guest bound report: "+err.Error())
		return
	}
	if !validBoundName(req.Bound) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("bound %.80q: want 1 to 64 of a-z, 0-9 and _", req.Bound))
		return
	}
	s, err := c.st.GetSession(r.Context(), sid)
	if err != nil {
		c.writeGuestBoundErr(w, sid, hostID, err)
		return
	}
	if !s.RunsOn(hostID, req.Epoch) {
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, fmt.Sprintf("%s; the report came from host %s at epoch %d",
			s.Where(), hostID, req.Epoch))
		return
	}
	ok, repeated := c.reports.admit(reportKey{sid, req.Bound}, req.Repeated, c.now())
	if !ok { // counted into the next report of this bound
		w.WriteHeader(http.StatusNoContent)
		return
	}
	data, _ := json.Marshal(map[string]any{"bound": req.Bound, "limit": req.Limit, "got": req.Got,
		"repeated": repeated, "message": clip(req.Message, hostlink.MaxGuestBoundMessage)})
	_, err = c.st.AppendEvent(r.Context(), store.NewEvent{SessionID: sid, Type: hostlink.EventGuestBound, Data: data, Epoch: req.Epoch, At: c.now()})
	if err != nil {
		c.writeGuestBoundErr(w, sid, hostID, err)
		return
	}
	c.wake(r.Context(), SessionTopic(sid))
	w.WriteHeader(http.StatusNoContent)
}

func (c *linkHandlers) writeGuestBoundErr(w http.ResponseWriter, sid domain.SessionID, hostID domain.HostID, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		hostlink.WriteError(w, http.StatusNotFound, hostlink.CodeNotFound, err.Error())
	case errors.Is(err, store.ErrStaleEpoch):
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, err.Error())
	default:
		c.log.Warn("record guest bound", "session_id", sid, "host_id", hostID, "err", err)
		hostlink.WriteError(w, http.StatusServiceUnavailable, hostlink.CodeUnavailable, err.Error())
	}
}

// validBoundName: 1 to 64 of a-z, 0-9 and _.
func validBoundName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	return strings.Trim(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == ""
}

// clip cuts s to at most n bytes of valid UTF-8.
func clip(s string, n int) string {
	if len(s) > n {
		s = s[:n]
	}
	return strings.ToValidUTF8(s, "")
}

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
