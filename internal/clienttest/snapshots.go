package clienttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// Fake snapshot sizes: every snapshot holds SnapshotBytes; the first of a
// session uploads FirstUpload, later ones only NextUpload (what changed).
const (
	SnapshotBytes = 1 << 30
	FirstUpload   = 256 << 20
	NextUpload    = 4 << 20
)

// FailSnapshots makes every snapshot fail with reason ("": succeed), as
// the real server reports it: a suspend leaves the session active with the
// reason, a snapshot answers 500.
func (s *Server) FailSnapshots(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapFail = reason
}

// RaceSuspend makes the next suspends end as outcome says once their
// snapshot is committed: "resumed_since" (a request resumed the session at
// once: it answers active) or "superseded" (a delete took it first: it
// answers completed, with no snapshot).
func (s *Server) RaceSuspend(outcome string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raceOn = outcome
}

func terminal(state string) bool { return state == "completed" || state == "dead" }

// inUse resumes an idle session before h runs, as the real server does for
// exec and file requests.
func (s *Server) inUse(h func(http.ResponseWriter, *http.Request, string)) func(http.ResponseWriter, *http.Request, string) {
	return func(w http.ResponseWriter, r *http.Request, id string) {
		s.mu.Lock()
		if sess := s.findSession(id); sess.State == "idle" {
			s.resumeLocked(sess)
		}
		s.mu.Unlock()
		h(w, r, id)
	}
}

// snapshotLocked commits a snapshot of sess taken on its host, makes it the
// head and marks delivered outbox items durable.
func (s *Server) snapshotLocked(sess *apiv1.Session, reason string) apiv1.Snapshot {
	s.nextSnap++
	prev := s.snaps[sess.ID]
	sn := apiv1.Snapshot{
		ID: fmt.Sprintf("snap%d", s.nextSnap), ParentID: sess.HeadSnapshot, HostID: sess.HostID, Reason: reason,
		Bytes: SnapshotBytes, Uploaded: FirstUpload, CreatedAt: BaseTime().Add(time.Duration(s.nextSnap) * time.Minute),
	}
	if len(prev) > 0 {
		sn.Uploaded = NextUpload
	}
	s.snaps[sess.ID] = append(prev, sn)
	sess.HeadSnapshot = sn.ID
	for i := range s.outbox[sess.ID] {
		if it := &s.outbox[sess.ID][i]; it.State == "delivered" {
			it.State = "durable"
		}
	}
	for _, h := range s.hosts {
		if h.ID == sn.HostID {
			h.Capacity.CachedSnapshots = append(h.Capacity.CachedSnapshots, sn.ID)
		}
	}
	return sn
}

// resumeLocked makes an idle session active on h1 and delivers its pending
// outbox items.
func (s *Server) resumeLocked(sess *apiv1.Session) {
	sess.State, sess.DesiredState, sess.HostID, sess.Reason = "active", "active", "h1", ""
	sess.Epoch++
	s.deliverLocked(sess.ID)
	s.addEventLocked(sess.ID, "state", map[string]string{"state": "active"})
}

func (s *Server) deliverLocked(id string) {
	for i := range s.outbox[id] {
		if it := &s.outbox[id][i]; it.State == "pending" {
			it.State = "delivered"
		}
	}
}

// suspend: an active session is snapshotted and goes idle (with wait=false
// the answer is the session as it was, though the fake finishes at once);
// an idle one is returned as it is; anything else is a conflict.
func (s *Server) suspend(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	switch sess.State {
	case "idle":
		answer := *sess
		answer.Suspend = &apiv1.SuspendOutcome{Result: apiv1.SuspendAlreadyIdle, SnapshotID: sess.HeadSnapshot}
		writeJSON(w, 200, answer)
		return
	case "active":
	default:
		writeErr(w, 409, "conflict", fmt.Sprintf("session %s is %s; only an active session can be suspended", id, sess.State))
		return
	}
	s.nextOp++
	op := fmt.Sprintf("op%d", s.nextOp+1) // op1 is the create
	if s.snapFail != "" {
		sess.Reason = "suspend failed: " + s.snapFail
		answer := *sess
		answer.Suspend = &apiv1.SuspendOutcome{Result: apiv1.SuspendFailed, OpID: op, Why: sess.Reason}
		writeJSON(w, 200, answer)
		return
	}
	before := *sess
	if s.raceOn == apiv1.SuspendSuperseded {
		sess.State, sess.DesiredState, sess.HostID = "completed", "deleted", ""
		answer := *sess
		answer.Suspend = &apiv1.SuspendOutcome{Result: apiv1.SuspendSuperseded, OpID: op, Why: "a destroy operation (op0) took the session first"}
		writeJSON(w, 200, answer)
		return
	}
	sn := s.snapshotLocked(sess, "suspend")
	sess.State, sess.DesiredState, sess.HostID = "idle", "idle", ""
	s.addEventLocked(id, "state", map[string]string{"state": "idle"})
	if r.URL.Query().Get("wait") == "false" {
		writeJSON(w, 200, before) // as the real server: the session as it was
		return
	}
	outcome := &apiv1.SuspendOutcome{Result: apiv1.SuspendSuspended, SnapshotID: sn.ID, OpID: op}
	if s.raceOn == apiv1.SuspendResumedSince {
		s.resumeLocked(sess)
		outcome.Result = apiv1.SuspendResumedSince
	}
	answer := *sess
	answer.Suspend = outcome
	writeJSON(w, 200, answer)
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	switch sess.State {
	case "active":
	case "idle":
		s.resumeLocked(sess)
	default:
		writeErr(w, 409, "conflict", fmt.Sprintf("session %s is %s", id, sess.State))
		return
	}
	writeJSON(w, 200, sess)
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	if sess.State != "active" {
		writeErr(w, 409, "conflict", fmt.Sprintf("session %s is %s", id, sess.State))
		return
	}
	if s.snapFail != "" {
		writeErr(w, 500, "internal", fmt.Sprintf("snapshot session %s: %s", id, s.snapFail))
		return
	}
	writeJSON(w, 201, s.snapshotLocked(sess, "snapshot"))
}

// putOutbox records an item once per id and answers with it as recorded
// (pending), then delivers it, resuming an idle session.
func (s *Server) putOutbox(w http.ResponseWriter, r *http.Request, id string) {
	var req apiv1.OutboxRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeErr(w, 400, "bad_request", "decode body: "+err.Error())
		return
	}
	if req.ID == "" || req.Kind == "" {
		writeErr(w, 400, "bad_request", "outbox items need an id and a kind")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.findSession(id)
	if terminal(sess.State) {
		writeErr(w, 409, "conflict", fmt.Sprintf("session %s is %s", id, sess.State))
		return
	}
	items := s.outbox[id]
	if i := slices.IndexFunc(items, func(it apiv1.OutboxItem) bool { return it.ID == req.ID }); i >= 0 {
		writeJSON(w, 202, items[i])
		return
	}
	it := apiv1.OutboxItem{Seq: int64(len(items) + 1), ID: req.ID, Kind: req.Kind, Payload: req.Payload,
		State: "pending", CreatedAt: BaseTime().Add(time.Duration(len(items)) * time.Second)}
	s.outbox[id] = append(items, it)
	switch sess.State {
	case "idle":
		s.resumeLocked(sess)
	case "active":
		s.deliverLocked(id)
	}
	writeJSON(w, 202, it)
}

func (s *Server) listOutbox(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := apiv1.OutboxList{Items: slices.Clone(s.outbox[id])}
	if out.Items == nil {
		out.Items = []apiv1.OutboxItem{}
	}
	writeJSON(w, 200, out)
}
