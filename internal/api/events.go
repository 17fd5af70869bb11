package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/api/apiv1"
	"github.com/engrams/engrams/internal/lifecycle"
)

const eventPage = 500

// events streams a session's event log as server-sent events. The event
// id is the log index, so a client resumes with Last-Event-ID. With
// follow (the default) the stream stays open until the session is
// terminal and every event was sent.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	after, err := afterSeq(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	sess, err := s.st.GetSession(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	follow := r.URL.Query().Get("follow") != "false"
	if follow && sess.State == lifecycle.Idle {
		// Subscribing to a session's live events resumes it.
		go func() { _, _ = s.co.Resume(context.WithoutCancel(r.Context()), id) }()
	}
	sub := s.st.Subscribe(r.Context(), "session:"+id)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		evs, err := s.st.ListEvents(r.Context(), id, after, eventPage)
		if err != nil {
			return // the client sees the stream end and reconnects with Last-Event-ID
		}
		for _, e := range evs {
			b, _ := json.Marshal(apiv1.Event{Seq: e.Seq, Type: e.Type, Data: e.Data, Time: e.CreatedAt})
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, b)
			after = e.Seq
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(evs) == eventPage {
			continue
		}
		if !follow {
			return
		}
		if sess, err := s.st.GetSession(r.Context(), id); err == nil && sess.State.Terminal() && sess.EventSeq <= after {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-sub:
		case <-poll.C:
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		}
	}
}

func afterSeq(r *http.Request) (int64, error) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		v = r.URL.Query().Get("after")
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("Last-Event-ID/after must be a non-negative event index, got %q", v)
	}
	return n, nil
}
