package guest

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/engrams/engrams/internal/guestapi"
)

// harnessAdapter is what the daemon needs of the harness adapter
// (adapter.Adapter): it runs prompts the outbox applied and keeps their events.
type harnessAdapter interface {
	Run(ctx context.Context) error
	Notify()
	Status() guestapi.HarnessStatus
	EventHead() (int64, error)
	FollowEvents(ctx context.Context, after int64, fn func(line []byte) error) error
}

func (s *Server) handleHarness(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.harness.Status())
}

// handleHarnessEvents streams the event log as NDJSON from ?after=N (see
// guestapi.PathHarnessEvents and HeaderHarnessHead).
func (s *Server) handleHarnessEvents(w http.ResponseWriter, r *http.Request) {
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("after must be a non-negative integer, got %q", v))
			return
		}
		after = n
	}
	head, err := s.harness.EventHead()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	after = min(after, head) // the guest was rolled back: stream from its head
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set(guestapi.HeaderHarnessHead, strconv.FormatInt(head, 10))
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		return
	}
	err = s.harness.FollowEvents(r.Context(), after, func(line []byte) error {
		if _, err := w.Write(line); err != nil {
			return err
		}
		return rc.Flush()
	})
	if err != nil && r.Context().Err() == nil {
		s.log.Debug("harness event stream ended", "err", err)
	}
}
