package api

import (
	"context"
	"net/http"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egresslog"
)

// EgressLog reads sessions' egress logs (egresslog.Log).
type EgressLog interface {
	EgressEvents(ctx context.Context, sid domain.SessionID, q egresslog.Query) ([]domain.EgressEvent, error)
}

// defaultEgressPage is the page a read without ?limit= gets.
const defaultEgressPage = 100

// egressRouter serves a session's egress log.
type egressRouter struct {
	*base
	co EgressLog
}

func (s *egressRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteEgress, s.listEgress)
}

func (s *egressRouter) listEgress(w http.ResponseWriter, r *http.Request) {
	q, ok := egressQuery(w, r)
	if !ok {
		return
	}
	evs, err := s.co.EgressEvents(r.Context(), pathSession(r), q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.EgressList{Events: make([]apiv1.EgressEvent, 0, len(evs))}
	for _, e := range evs {
		out.Events = append(out.Events, apiv1.EgressEvent{Seq: e.Seq, Time: e.At, Kind: e.Kind, Proto: e.Proto, Addr: e.Addr, Host: e.Host, Port: e.Port, Verdict: e.Verdict,
			BytesUp: e.BytesUp, BytesDown: e.BytesDown, Reason: e.Reason, Dropped: e.Dropped})
	}
	switch {
	case q.Ascending && len(evs) > 0:
		out.Next = evs[len(evs)-1].Seq
	case q.Ascending:
		out.Next = q.After
	case len(evs) == q.Limit:
		out.Next = evs[len(evs)-1].Seq
	}
	writeJSON(w, http.StatusOK, out)
}

// egressQuery reads ?before=, ?after= (not both) and ?limit= (1 to
// apiv1.MaxEgressPage, default defaultEgressPage); a bad one is answered
// with 400.
func egressQuery(w http.ResponseWriter, r *http.Request) (egresslog.Query, bool) {
	vals := r.URL.Query()
	q := egresslog.Query{Limit: defaultEgressPage}
	num := func(name string, lo, hi int64) (int64, bool) {
		n, err := strconv.ParseInt(vals.Get(name), 10, 64)
		if err != nil || n < lo || n > hi {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, name+" "+quote(vals.Get(name))+": want a whole number from "+itoa(lo)+" to "+itoa(hi))
			return 0, false
		}
		return n, true
	}
	var ok bool
	if vals.Has("before") && vals.Has("after") {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "before and after: give one (before pages back from the newest, after follows from a seq)")
		return q, false
	}
	if vals.Has("before") {
		if q.Before, ok = num("before", 1, 1<<62); !ok {
			return q, false
		}
	}
	if vals.Has("after") {
		q.Ascending = true
		if q.After, ok = num("after", 0, 1<<62); !ok {
			return q, false
		}
	}
	if vals.Has("limit") {
		n, ok := num("limit", 1, apiv1.MaxEgressPage)
		if !ok {
			return q, false
		}
		q.Limit = int(n)
	}
	return q, true
}
