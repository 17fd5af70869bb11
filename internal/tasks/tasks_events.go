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

// ingestHarnessEvents appends the events past the task's cursor, as far as
// the task's quotas take them (the rest is dropped but acknowledged, with a
// note), and moves the task's state along. Only the host the session is
// placed on, at the session's current epoch, may write; a session no task
// owns keeps no harness events (they are acknowledged and dropped).
func (c *Tasks) ingestHarnessEvents(ctx context.Context, hostID domain.HostID, sid domain.SessionID, req hostlink.HarnessEventsRequest) (int64, error) {
	s, err := c.st.GetSession(ctx, sid)
	if err != nil {
		return 0, err
	}
	if !s.RunsOn(hostID, req.Epoch) {
		return 0, fmt.Errorf("%w: %s; events came from host %s at epoch %d",
			store.ErrStaleEpoch, s.Where(), hostID, req.Epoch)
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
	evs, cut, err := c.guestEvents(req.Events)
	if err != nil {
		return 0, err
	}
	now := c.now()
	in := store.TaskIngest{TaskID: t.ID, SessionID: sid, RewoundTo: req.RewoundTo, Events: evs}
	var notes []domain.TaskEvent
	if in.RewoundTo != nil && !c.guard.rewind(t.ID, sid, now) {
		in.RewoundTo = nil
		c.metrics.QuotaRefused(QuotaRewinds)
		if c.guard.noteDue(t.ID, QuotaRewinds, now, true) {
			c.log.Info("a guest's rewind refused over the task's quota", "task_id", t.ID, "session_id", sid)
			if notes, err = c.st.AppendTaskEvents(ctx, t.ID, []domain.TaskEvent{c.quotas.rewindNote()}); err != nil {
				return 0, fmt.Errorf("note a refused rewind in task %s: %w", t.ID, err)
			}
		}
	}
	in.Quota = c.quotas.storeQuota(c.guard.admit(t.ID, now), c.guard.noteDue(t.ID, store.QuotaRate, now, false))
	res, err := c.st.IngestTaskEvents(ctx, in)
	if err != nil {
		return 0, fmt.Errorf("ingest into task %s: %w", t.ID, err)
	}
	taken := c.countIngest(t.ID, in, res, cut, now)
	c.afterIngest(ctx, t, sid, append(notes, res.Added...), taken)
	return res.Cursor, nil
}

// guestEvents checks a batch of a guest's events and turns each into what
// the task stores (guestTaskEvent); cut has the guest seqs of those over
// the size quota.
func (c *Tasks) guestEvents(in []guestapi.HarnessEvent) ([]domain.TaskEvent, map[int64]bool, error) {
	evs := make([]domain.TaskEvent, len(in))
	var cut map[int64]bool
	for i, e := range in {
		if e.Type == "" || e.Seq <= 0 {
			return nil, nil, fmt.Errorf("%w: harness event %d has no type or seq", domain.ErrInvalid, i)
		}
		if i > 0 && e.Seq <= in[i-1].Seq {
			return nil, nil, fmt.Errorf("%w: harness event seqs must increase, got %d after %d", domain.ErrInvalid, e.Seq, in[i-1].Seq)
		}
		var over bool
		if evs[i], over = guestTaskEvent(e, c.now(), c.quotas.MaxEventBytes); over {
			if cut == nil {
				cut = map[int64]bool{}
			}
			cut[e.Seq] = true
			continue
		}
		priceUsage(&evs[i], c.prices)
	}
	return evs, cut, nil
}

// countIngest spends the rate tokens of the guest events the task took and
// counts what the quotas refused; it returns how many guest events were
// taken.
func (c *Tasks) countIngest(taskID domain.TaskID, in store.TaskIngest, res store.TaskIngested, cut map[int64]bool, now time.Time) int {
	taken := 0
	for _, e := range res.Added {
		if e.GuestSeq > 0 {
			taken++
			if cut[e.GuestSeq] {
				c.metrics.QuotaRefused(QuotaEventSize)
			}
		}
	}
	c.guard.took(taskID, taken, now)
	for kind, n := range res.Dropped {
		for range n {
			c.metrics.QuotaRefused(kind)
		}
	}
	if _, noted := in.Quota.Notes[store.QuotaRate]; noted && res.Dropped[store.QuotaRate] > 0 {
		c.guard.noteDue(taskID, store.QuotaRate, now, true)
	}
	for _, e := range res.Added { // logged with the task's notes, not at every drop: a flood must not flood the log too
		if e.GuestSeq == 0 {
			c.log.Info("guest events dropped over the task's quotas", "task_id", taskID, "session_id", in.SessionID, "dropped", res.Dropped)
			break
		}
	}
	return taken
}

// afterIngest moves the task along after events were appended: the guest's
// (taken of them) count as session activity, and they and the notes move
// the task's state and wake its followers.
func (c *Tasks) afterIngest(ctx context.Context, t domain.Task, sid domain.SessionID, added []domain.TaskEvent, taken int) {
	if len(added) == 0 {
		return
	}
	if taken > 0 {
		if err := c.st.TouchSession(ctx, sid, c.now()); err != nil { // an agent at work is activity
			c.log.Warn("record activity", "session_id", sid, "err", err)
		}
	}
	if cur, err := c.st.GetTask(ctx, t.ID); err == nil { // the state the events move on from
		t = cur
	}
	if st, msg, ok := taskStateAfter(t, added); ok {
		// Conditional: a stop (or a failed setup) meanwhile stays.
		live := statesAllowing(TaskRunStarted, TaskHarnessError, TaskTurnEnded)
		if _, err := c.st.UpdateTaskState(ctx, t.ID, live, st, msg, c.now()); err != nil {
			c.log.Warn("update task state from its events", "task_id", t.ID, "err", err)
		}
	}
	c.wake(ctx, Topic(t.ID))
}

// maxNoteTurn bounds the turn a note of a refused event keeps (the
// coordinator's turns are UUIDs; a longer one is the guest's invention).
const maxNoteTurn = 128

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
// trusted: an unknown type becomes a harness error event saying so; an
// event over maxBytes (> 0) — its type, turn and data as sent, or its type
// and payload as stored (the turn merged into the data, re-encoded) —
// keeps only a note of its size (over reports it); a time more than a
// minute in the future (a guest clock) is replaced by now. A note keeps
// the turn only when it is short.
func guestTaskEvent(e guestapi.HarnessEvent, now time.Time, maxBytes int) (ev domain.TaskEvent, over bool) {
	turn := e.Turn
	if len(turn) > maxNoteTurn {
		turn = ""
	}
	typ, size := e.Type, len(e.Type)+len(e.Turn)+len(e.Data)
	var payload json.RawMessage
	switch {
	case !guestEventType(typ):
		if r := []rune(typ); len(r) > 64 {
			typ = string(r[:64])
		}
		payload, _ = json.Marshal(map[string]string{"kind": guestapi.ErrorHarness, "turn": turn,
			"message": fmt.Sprintf("the session sent an event of unknown type %q", typ)})
		typ = guestapi.EventError
	case maxBytes > 0 && size > maxBytes:
		payload, over = sizeNote(turn, size), true
	default:
		// Merging the turn re-encodes the data, which may grow it (JSON
		// escapes): the bound holds for what is stored too.
		payload = harnessPayload(e)
		if stored := len(typ) + len(payload); maxBytes > 0 && stored > maxBytes {
			payload, over = sizeNote(turn, stored), true
		}
	}
	at := e.At
	if at.After(now.Add(time.Minute)) {
		at = now
	}
	return domain.TaskEvent{Type: typ, Payload: payload, At: at, GuestSeq: e.Seq}, over
}

// sizeNote is the payload kept of an event over the size quota.
func sizeNote(turn string, size int) json.RawMessage {
	raw, _ := json.Marshal(map[string]any{"turn": turn, "truncated": true, "bytes": size})
	return raw
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

// harnessStateEvent is the state event of a harness event of type typ;
// false for the types that leave a task's state as it is.
func harnessStateEvent(typ string) (StateEvent, bool) {
	switch typ {
	case guestapi.EventRunStarted:
		return TaskRunStarted, true
	case guestapi.EventError:
		return TaskHarnessError, true
	case guestapi.EventIdle:
		return TaskTurnEnded, true
	}
	return "", false
}

// taskStateAfter is the task's state after its harness produced events,
// each applied by Transition: running once a run starts (clearing the last
// turn's error), the error's "kind: message" kept from an error event on,
// idle when a turn ends. A task whose state refuses them (stopped, failed)
// stays as it is. ok is false when nothing changes.
func taskStateAfter(t domain.Task, evs []domain.TaskEvent) (domain.TaskState, string, bool) {
	state, msg := t.State, t.Error
	for _, e := range evs {
		ev, ok := harnessStateEvent(e.Type)
		if !ok {
			continue
		}
		next, err := Transition(state, ev)
		if err != nil {
			return t.State, t.Error, false
		}
		state = next
		switch ev {
		case TaskRunStarted:
			msg = ""
		case TaskHarnessError:
			var d struct {
				Kind    string `json:"kind"`
				Message string `json:"message"`
			}
			_ = json.Unmarshal(e.Payload, &d)
			msg = d.Kind + ": " + d.Message
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
type Rewinder struct {
	Store interface {
		TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error)
		IngestTaskEvents(ctx context.Context, in store.TaskIngest) (store.TaskIngested, error)
	}
}

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
