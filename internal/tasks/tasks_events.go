package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// maxHarnessEventBatch bounds one batch of harness events from a host.
const maxHarnessEventBatch = 1000

// RouteHostLink adds the harness event relay to the host-link mux
// (hostlink.PathHarnessEvents).
func (c *Tasks) RouteHostLink(mux *http.ServeMux) {
	mux.HandleFunc("POST "+hostlink.PathHarnessEvents, c.handleHarnessEvents)
}

// handleHarnessEvents takes the events a session's harness adapter
// produced, relayed by the host the session is placed on, into the
// session's task. The answer's cursor is the last guest seq the task has
// from this session: the host streams from there.
func (c *Tasks) handleHarnessEvents(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	sid := domain.SessionID(r.PathValue("id"))
	var req hostlink.HarnessEventsRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 32<<20)).Decode(&req); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode harness events: "+err.Error())
		return
	}
	if len(req.Events) > maxHarnessEventBatch {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("%d harness events in one batch, at most %d", len(req.Events), maxHarnessEventBatch))
		return
	}
	cursor, err := c.ingestHarnessEvents(r.Context(), hostID, sid, req)
	switch {
	case errors.Is(err, store.ErrNotFound):
		hostlink.WriteError(w, http.StatusNotFound, hostlink.CodeNotFound, err.Error())
	case errors.Is(err, store.ErrStaleEpoch):
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, err.Error())
	case errors.Is(err, domain.ErrInvalid):
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, err.Error())
	case err != nil:
		c.log.Warn("ingest harness events", "session_id", sid, "host_id", hostID, "err", err)
		hostlink.WriteError(w, http.StatusServiceUnavailable, hostlink.CodeUnavailable, err.Error())
	default:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(hostlink.HarnessEventsResponse{Cursor: cursor})
	}
}

// ingestHarnessEvents appends the events past the task's cursor and moves
// the task's state along. Only the host the session is placed on, at an
// session's current epoch, may write; a session no task owns
// keeps no harness events (they are acknowledged and dropped).
func (c *Tasks) ingestHarnessEvents(ctx context.Context, hostID domain.HostID, sid domain.SessionID, req hostlink.HarnessEventsRequest) (int64, error) {
	s, err := c.st.GetSession(ctx, sid)
	if err != nil {
		return 0, fmt.Errorf("get session %s: %w", sid, err)
	}
	if s.HostID != hostID || req.Epoch != s.Epoch || !s.State.HasVM() {
		return 0, fmt.Errorf("%w: session %s is %s on host %s at epoch %d; events came from host %s at epoch %d",
			store.ErrStaleEpoch, sid, s.State, s.HostID, s.Epoch, hostID, req.Epoch)
	}
	t, err := c.st.TaskBySession(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		if n := len(req.Events); n > 0 {
			return req.Events[n-1].Seq, nil
		}
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("task of session %s: %w", sid, err)
	}
	evs := make([]domain.TaskEvent, len(req.Events))
	for i, e := range req.Events {
		if e.Type == "" || e.Seq <= 0 {
			return 0, fmt.Errorf("%w: harness event %d has no type or seq", domain.ErrInvalid, i)
		}
		if i > 0 && e.Seq <= req.Events[i-1].Seq {
			return 0, fmt.Errorf("%w: harness event seqs must increase, got %d after %d", domain.ErrInvalid, e.Seq, req.Events[i-1].Seq)
		}
		evs[i] = guestTaskEvent(e, c.now())
	}
	res, err := c.st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: t.ID, SessionID: sid, RewoundTo: req.RewoundTo, Events: evs})
	if err != nil {
		return 0, fmt.Errorf("ingest into task %s: %w", t.ID, err)
	}
	cursor, added := res.Cursor, res.Added
	if len(added) == 0 {
		return cursor, nil
	}
	if err := c.st.TouchSession(ctx, sid, c.now()); err != nil { // an agent at work is activity
		c.log.Warn("record activity", "session_id", sid, "err", err)
	}
	if cur, err := c.st.GetTask(ctx, t.ID); err == nil { // the state the events move on from
		t = cur
	}
	if st, msg, ok := taskStateAfter(t, added); ok {
		// Conditional: a stop (or a failed setup) meanwhile stays.
		live := []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle}
		if _, err := c.st.UpdateTaskState(ctx, t.ID, live, st, msg, c.now()); err != nil {
			c.log.Warn("update task state from its events", "task_id", t.ID, "err", err)
		}
	}
	c.wake(ctx, Topic(t.ID))
	return cursor, nil
}

// maxHarnessEventData bounds one harness event's stored data.
const maxHarnessEventData = 64 << 10

// guestEventType reports whether a guest may produce events of type t:
// the harness adapter's types only, so a guest cannot write the
// coordinator's own events (prompt, repo_cloned, stopped, ...).
func guestEventType(t string) bool {
	switch t {
	case guestapi.EventRunStarted, guestapi.EventAssistantText, guestapi.EventToolCall, guestapi.EventToolResult,
		guestapi.EventFileChanged, guestapi.EventUsage, guestapi.EventQuestion, guestapi.EventIdle, guestapi.EventError:
		return true
	}
	return false
}

// guestTaskEvent is how a guest's event is stored. The guest is not
// trusted: an unknown type becomes a harness error event saying so, data
// over maxHarnessEventData is replaced by a note of its size, and a time
// more than a minute in the future (a guest clock) is replaced by now.
func guestTaskEvent(e guestapi.HarnessEvent, now time.Time) domain.TaskEvent {
	typ, payload := e.Type, harnessPayload(e)
	switch {
	case !guestEventType(typ):
		if r := []rune(typ); len(r) > 64 {
			typ = string(r[:64])
		}
		payload, _ = json.Marshal(map[string]string{"kind": guestapi.ErrorHarness, "turn": e.Turn,
			"message": fmt.Sprintf("the session sent an event of unknown type %q", typ)})
		typ = guestapi.EventError
	case len(payload) > maxHarnessEventData:
		payload, _ = json.Marshal(map[string]any{"turn": e.Turn, "truncated": true, "bytes": len(payload)})
	}
	at := e.At
	if at.After(now.Add(time.Minute)) {
		at = now
	}
	return domain.TaskEvent{Type: typ, Payload: payload, At: at, GuestSeq: e.Seq}
}

// harnessPayload is the stored payload of a harness event: its data with
// the turn it belongs to.
func harnessPayload(e guestapi.HarnessEvent) json.RawMessage {
	if e.Turn == "" {
		return e.Data
	}
	var m map[string]any
	if len(e.Data) == 0 || json.Unmarshal(e.Data, &m) != nil || m == nil {
		m = map[string]any{}
		if len(e.Data) > 0 {
			m["data"] = e.Data
		}
	}
	m["turn"] = e.Turn
	raw, _ := json.Marshal(m)
	return raw
}

// taskStateAfter is the task's state after its harness produced events:
// running once a run starts (clearing the last turn's error), the error's
// "kind: message" kept from an error event on, idle when a turn ends. A
// stopped or failed task stays so. ok is false when nothing changes.
func taskStateAfter(t domain.Task, evs []domain.TaskEvent) (domain.TaskState, string, bool) {
	if t.State == domain.TaskStopped || t.State == domain.TaskFailed {
		return t.State, t.Error, false
	}
	state, msg := t.State, t.Error
	for _, e := range evs {
		switch e.Type {
		case guestapi.EventRunStarted:
			state, msg = domain.TaskRunning, ""
		case guestapi.EventError:
			var d struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(e.Payload, &d)
			msg = d.Kind + ": " + d.Message
		case guestapi.EventIdle:
			state = domain.TaskIdle
		}
	}
	if state == t.State && msg == t.Error {
		return state, msg, false
	}
	return state, msg, true
}

// Rewinder lowers a session's task cursor when the session resumes after
// its incarnation was lost (a coordinator.RestoreObserver). It needs only
// the store, so the coordinator can be given one before tasks exist.
type Rewinder struct{ Store store.Store }

// SessionRestored lowers the session's task cursor to the harness event
// head of the snapshot it resumes from: after a lost incarnation, the
// restored guest's log goes on from there with events the task has not
// seen, even where their seqs repeat ones the lost guest relayed. (A
// resume after a suspend finds the cursor at or below it: nothing moves.)
func (r Rewinder) SessionRestored(ctx context.Context, s domain.Session, head domain.Snapshot) error {
	if head.HarnessSeq < 0 {
		return nil // unknown: the guest's own head check still catches a shorter log
	}
	t, err := r.Store.TaskBySession(ctx, s.ID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("task of session %s: %w", s.ID, err)
	}
	seq := head.HarnessSeq
	if _, err := r.Store.IngestTaskEvents(ctx, store.TaskIngest{TaskID: t.ID, SessionID: s.ID, RewoundTo: &seq}); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("rewind the harness events of session %s to %d: %w", s.ID, seq, err)
	}
	return nil
}
