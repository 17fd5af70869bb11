package api

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/store"
)

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateSessionRequest
	if !s.decode(w, r, &req) {
		return
	}
	spec := hostlink.MachineSpec{MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, Env: req.Env, Image: req.Image, Harness: req.Harness, IdleTimeoutSec: req.IdleTimeoutSec, MaxLifetimeSec: req.MaxLifetimeSec}
	sess, err := s.co.CreateSession(r.Context(), spec, req.IdempotencyKey)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.URL.Query().Get("wait") != "false" {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
		defer cancel()
		if sess, err = s.co.WaitSession(ctx, sess.ID, coordinator.Settled); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, sessionOut(sess, nil))
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SessionFilter{HostID: q.Get("host")}
	if st := q.Get("state"); st != "" {
		if !lifecycle.State(st).Valid() {
			writeError(w, http.StatusBadRequest, "bad_request", "unknown state "+st)
			return
		}
		f.States = []lifecycle.State{lifecycle.State(st)}
	}
	ss, err := s.st.ListSessions(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.SessionList{Sessions: make([]apiv1.Session, 0, len(ss))}
	for _, x := range ss {
		out.Sessions = append(out.Sessions, sessionOut(x, nil))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.st.GetSession(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ops, err := s.st.ListOps(r.Context(), sess.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	snaps, err := s.st.ListSnapshots(r.Context(), sess.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := sessionOut(sess, ops)
	for _, sn := range snaps {
		out.Snapshots = append(out.Snapshots, snapshotOut(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.co.DeleteSession(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.URL.Query().Get("wait") != "false" {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
		defer cancel()
		terminal := func(x store.Session) bool { return x.State.Terminal() }
		if sess, err = s.co.WaitSession(ctx, sess.ID, terminal); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, sessionOut(sess, nil))
}

func sessionOut(s store.Session, ops []store.Op) apiv1.Session {
	out := apiv1.Session{
		ID: s.ID, State: string(s.State), DesiredState: s.DesiredState, HostID: s.HostID,
		Epoch: s.Epoch, Reason: s.Reason, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		HeadSnapshot: s.HeadSnapshotID, LastActivity: s.LastActivity,
	}
	if spec, err := coordinator.Spec(s); err == nil {
		out.Spec = apiv1.SessionSpec{MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: spec.Env, Image: spec.Image, Harness: spec.Harness, IdleTimeoutSec: spec.IdleTimeoutSec, MaxLifetimeSec: spec.MaxLifetimeSec}
	}
	for _, o := range ops {
		out.Ops = append(out.Ops, apiv1.Op{ID: o.ID, Kind: string(o.Kind), State: string(o.State), Step: o.Step,
			Epoch: o.Epoch, Attempts: o.Attempts, Error: o.Error, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt})
	}
	return out
}

func snapshotOut(s store.Snapshot) apiv1.Snapshot {
	return apiv1.Snapshot{ID: s.ID, ParentID: s.ParentID, HostID: s.HostID, Reason: s.Reason, Bytes: s.Bytes, Uploaded: s.Uploaded, CreatedAt: s.CreatedAt}
}

func (s *Server) suspend(w http.ResponseWriter, r *http.Request) {
	sess, op, err := s.co.Suspend(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if op.ID != "" && r.URL.Query().Get("wait") != "false" {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
		defer cancel()
		// Done when the evict op ends: Idle, or Active again if it failed.
		if _, sess, err = s.co.WaitOp(ctx, op); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, sessionOut(sess, nil))
}

func (s *Server) resume(w http.ResponseWriter, r *http.Request) {
	sess, err := s.co.Resume(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOut(sess, nil))
}

func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.co.Snapshot(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOut(sn))
}

func (s *Server) putOutbox(w http.ResponseWriter, r *http.Request) {
	var req apiv1.OutboxRequest
	if !s.decode(w, r, &req) {
		return
	}
	it, err := s.co.PutOutbox(r.Context(), r.PathValue("id"), req.ID, req.Kind, req.Payload)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, outboxOut(it))
}

func (s *Server) listOutbox(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := s.st.GetSession(r.Context(), id); err != nil {
		s.fail(w, r, err)
		return
	}
	items, err := s.st.ListOutbox(r.Context(), id, 0, 1000)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.OutboxList{Items: make([]apiv1.OutboxItem, 0, len(items))}
	for _, it := range items {
		out.Items = append(out.Items, outboxOut(it))
	}
	writeJSON(w, http.StatusOK, out)
}

func outboxOut(it store.OutboxItem) apiv1.OutboxItem {
	return apiv1.OutboxItem{Seq: it.Seq, ID: it.ID, Kind: it.Kind, Payload: it.Payload, State: string(it.State), CreatedAt: it.CreatedAt}
}
