package api

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
)

// Changes wakes followers of a topic (the store's notifications, on every
// replica).
type Changes interface {
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// changeTopics maps the feed's topics to the store's: what the coordinator
// and the tasks service wake on every change.
func changeTopics() map[string]string {
	return map[string]string{
		apiv1.ChangeSessions: coordinator.TopicSessions,
		apiv1.ChangeTasks:    TopicTasks,
		apiv1.ChangeHosts:    coordinator.TopicHosts,
	}
}

// TopicTasks is tasks.TopicTasks (the API does not import the tasks
// service); a test checks they agree.
const TopicTasks = "tasks"

// changesCoalesce is the least time between two messages of one topic.
const changesCoalesce = 250 * time.Millisecond

// changes serves RouteChanges until the client leaves.
func (s *Server) changes(w http.ResponseWriter, r *http.Request) {
	if s.deps.Changes == nil {
		writeError(w, http.StatusNotFound, apiv1.CodeNotFound, "this server has no change feed")
		return
	}
	known := changeTopics()
	names, ok := changeNames(w, r, known)
	if !ok {
		return
	}
	ctx := r.Context()
	// Each topic has at most one message pending, so a busy topic never
	// crowds out another's.
	changed := make(chan string, len(names))
	pending := make(map[string]*atomic.Bool, len(names))
	for _, n := range names {
		pending[n] = new(atomic.Bool)
		sub := s.deps.Changes.Subscribe(ctx, known[n])
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case _, ok := <-sub:
					if !ok {
						return // the store closed
					}
					if !pending[n].Swap(true) {
						changed <- n
					}
				}
			}
		}()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	fmt.Fprint(w, ": following "+strings.Join(names, ",")+"\n\n")
	if flusher != nil {
		flusher.Flush()
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	last := map[string]time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-keepalive.C:
			fmt.Fprint(w, ": keepalive\n\n")
		case n := <-changed:
			if wait := changesCoalesce - time.Since(last[n]); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			last[n] = time.Now()
			pending[n].Store(false)
			fmt.Fprintf(w, "event: %s\ndata: {}\n\n", n)
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// changeNames are the topics r asks to follow, each once; false when the
// request is refused (answered).
func changeNames(w http.ResponseWriter, r *http.Request, known map[string]string) ([]string, bool) {
	var names []string
	for _, t := range strings.Split(r.URL.Query().Get("topics"), ",") {
		if t = strings.TrimSpace(t); t == "" || slices.Contains(names, t) {
			continue
		}
		if _, ok := known[t]; !ok {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "topics: "+quote(t)+" is not sessions, tasks or hosts")
			return nil, false
		}
		if t == apiv1.ChangeHosts && !principalFrom(r.Context()).Fleet {
			writeError(w, http.StatusForbidden, apiv1.CodeForbidden, "topics: hosts are a fleet operator's")
			return nil, false
		}
		names = append(names, t)
	}
	if len(names) == 0 {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "topics: name sessions, tasks or hosts (comma-separated)")
		return nil, false
	}
	return names, true
}
