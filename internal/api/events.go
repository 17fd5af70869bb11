package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// Pages of the event streams: a session's events are small; a task's may
// each be as large as a prompt (256 KiB), so a page of them stays under
// 25 MiB.
const (
	eventPage     = 500
	taskEventPage = 100
)

// events streams a session's event log as server-sent events. The event
// id is the log index, so a client resumes with Last-Event-ID. With
// follow (the default) the stream stays open until the session is
// terminal and every event was sent.
func (s *sessionsRouter) events(w http.ResponseWriter, r *http.Request) {
	id := pathSession(r)
	after, err := afterSeq(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, err.Error())
		return
	}
	sess, err := s.st.GetSession(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	follow := r.URL.Query().Get("follow") != "false"
	if follow && sess.State == domain.SessionIdle {
		// Subscribing to a session's live events resumes it.
		go func() { _, _ = s.co.Resume(context.WithoutCancel(r.Context()), id) }()
	}
	s.serveSSE(w, r, s.st.Subscribe(r.Context(), coordinator.SessionTopic(id)), after, follow, eventPage, func(ctx context.Context, after int64) ([]sseEvent, error) {
		evs, err := s.st.ListEvents(ctx, id, after, eventPage)
		out := make([]sseEvent, len(evs))
		for i, e := range evs {
			out[i] = sseEvent{seq: e.Seq, typ: e.Type, body: apiv1.Event{Seq: e.Seq, Type: e.Type, Data: e.Data, Time: e.CreatedAt}}
		}
		return out, err
	}, func(ctx context.Context, after int64) bool {
		sess, err := s.st.GetSession(ctx, id)
		return err == nil && sess.State.Terminal() && sess.EventSeq <= after
	})
}

// sseEvent is one server-sent event: its id, type and JSON body.
type sseEvent struct {
	seq  int64
	typ  string
	body any
}

// serveSSE streams pages of events after a seq as server-sent events (the
// event id is the seq, so a client resumes with Last-Event-ID); a page of
// pageSize events means more may follow at once. With follow
// it waits for more (woken by sub, or a poll each second, with a comment
// every 15 s to keep proxies from closing the stream) until the client
// leaves or finished says the log is complete.
func (s *base) serveSSE(w http.ResponseWriter, r *http.Request, sub <-chan struct{}, after int64, follow bool, pageSize int,
	page func(ctx context.Context, after int64) ([]sseEvent, error), finished func(ctx context.Context, after int64) bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		evs, err := page(r.Context(), after)
		if err != nil {
			return // the client sees the stream end and reconnects with Last-Event-ID
		}
		for _, e := range evs {
			b, _ := json.Marshal(e.body)
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.seq, e.typ, b)
			after = e.seq
		}
		if flusher != nil {
			flusher.Flush()
		}
		if len(evs) == pageSize {
			continue
		}
		if !follow || finished(r.Context(), after) {
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
		return 0, fmt.Errorf("Last-Event-ID/after must be a non-negative event index, got %s", quote(v))
	}
	return n, nil
}
