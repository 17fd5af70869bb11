package clienttest

import (
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// AddEgress appends an event to a session's egress log with the next seq,
// stamped BaseTime()+(seq-1) seconds unless it has a time.
func (s *Server) AddEgress(sessionID string, e apiv1.EgressEvent) apiv1.EgressEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.egress == nil {
		s.egress = map[string][]apiv1.EgressEvent{}
	}
	evs := s.egress[sessionID]
	e.Seq = int64(len(evs) + 1)
	if e.Time.IsZero() {
		e.Time = BaseTime().Add(time.Duration(len(evs)) * time.Second)
	}
	s.egress[sessionID] = append(evs, e)
	return e
}

// listEgress pages a session's egress log as the API does: newest first
// before ?before=, or oldest first after ?after=; ?limit= 1 to
// apiv1.MaxEgressPage, default 100.
func (s *Server) listEgress(w http.ResponseWriter, r *http.Request, id string) {
	q := r.URL.Query()
	num := func(name string, def, lo, hi int64) (int64, bool) {
		if !q.Has(name) {
			return def, true
		}
		n, err := strconv.ParseInt(q.Get(name), 10, 64)
		if err != nil || n < lo || n > hi {
			writeErr(w, 400, "bad_request", name+" "+strconv.Quote(q.Get(name))+": out of range")
			return 0, false
		}
		return n, true
	}
	limit, ok := num("limit", 100, 1, apiv1.MaxEgressPage)
	if !ok {
		return
	}
	s.mu.Lock()
	evs := s.egress[id]
	s.mu.Unlock()
	out := apiv1.EgressList{Events: []apiv1.EgressEvent{}}
	if q.Has("after") {
		after, ok := num("after", 0, 0, 1<<62)
		if !ok {
			return
		}
		for _, e := range evs {
			if e.Seq > after && int64(len(out.Events)) < limit {
				out.Events = append(out.Events, e)
			}
		}
		out.Next = after
		if len(out.Events) > 0 {
			out.Next = out.Events[len(out.Events)-1].Seq
		}
		writeJSON(w, 200, out)
		return
	}
	before, ok := num("before", int64(len(evs))+1, 1, 1<<62)
	if !ok {
		return
	}
	for i := len(evs) - 1; i >= 0 && int64(len(out.Events)) < limit; i-- {
		if evs[i].Seq < before {
			out.Events = append(out.Events, evs[i])
		}
	}
	if int64(len(out.Events)) == limit {
		out.Next = out.Events[len(out.Events)-1].Seq
	}
	writeJSON(w, 200, out)
}
