package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// SessionControl changes sessions (the coordinator).
type SessionControl interface {
	CreateSession(ctx context.Context, spec domain.SessionSpec, idempotencyKey string) (domain.Session, error)
	DeleteSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	WaitSession(ctx context.Context, id domain.SessionID, done func(domain.Session) bool) (domain.Session, error)
	// WaitStarted waits until a new session settles; a create refused for
	// lack of room is a *domain.RoomError.
	WaitStarted(ctx context.Context, id domain.SessionID) (domain.Session, error)
	Suspend(ctx context.Context, id domain.SessionID) (domain.Session, domain.Op, error)
	WaitOp(ctx context.Context, op domain.Op) (domain.Op, domain.Session, error)
	Outcome(ctx context.Context, op domain.Op) (coordinator.SuspendOutcome, error)
	Resume(ctx context.Context, id domain.SessionID) (domain.Session, error)
	Snapshot(ctx context.Context, id domain.SessionID) (domain.Snapshot, error)
	PutOutbox(ctx context.Context, sid domain.SessionID, id, kind string, payload json.RawMessage) (domain.OutboxItem, error)
}

// SessionReads are the session rows the API shows (the store satisfies it).
type SessionReads interface {
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	ListSessions(ctx context.Context, f domain.SessionFilter) ([]domain.Session, error)
	ListOps(ctx context.Context, sessionID domain.SessionID) ([]domain.Op, error)
	ListSnapshots(ctx context.Context, sessionID domain.SessionID) ([]domain.Snapshot, error)
	ListOutbox(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.OutboxItem, error)
	ListEvents(ctx context.Context, sessionID domain.SessionID, afterSeq int64, limit int) ([]domain.Event, error)
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// sessionsRouter serves the session resources: create, list, get, delete,
// suspend, resume, snapshot, the outbox and the event log.
type sessionsRouter struct {
	*base
	co SessionControl
	st SessionReads
}

func (s *sessionsRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteCreateSession, s.createSession)
	h(apiv1.RouteListSessions, s.listSessions)
	h(apiv1.RouteGetSession, s.getSession)
	h(apiv1.RouteDeleteSession, s.deleteSession)
	h(apiv1.RouteEvents, s.events)
	h(apiv1.RouteSuspend, s.suspend)
	h(apiv1.RouteResume, s.resume)
	h(apiv1.RouteSnapshot, s.snapshot)
	h(apiv1.RouteOutboxPut, s.putOutbox)
	h(apiv1.RouteOutboxList, s.listOutbox)
}

func (s *sessionsRouter) createSession(w http.ResponseWriter, r *http.Request) {
	var in createSessionIn
	if !s.decode(w, r, &in) {
		return
	}
	req := in.request()
	spec := domain.SessionSpec{MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, Env: req.Env, Image: req.Image, Harness: req.Harness, IdleTimeoutSec: req.IdleTimeoutSec, MaxLifetimeSec: req.MaxLifetimeSec, Egress: req.Egress,
		Owner: principalFrom(r.Context()).Owner(false)}
	sess, err := s.co.CreateSession(r.Context(), spec, ownKey(spec.Owner, req.IdempotencyKey))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.URL.Query().Get("wait") != "false" {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
		defer cancel()
		if sess, err = s.co.WaitStarted(ctx, sess.ID); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusCreated, sessionOut(sess, nil))
}

func (s *sessionsRouter) listSessions(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	viewer := principalFrom(r.Context()).Viewer()
	f := domain.SessionFilter{Viewer: &viewer, HostID: domain.HostID(q.Get("host")), Limit: p.limit + 1, AfterID: domain.SessionID(p.after)}
	if st := q.Get("state"); st != "" {
		if !domain.SessionState(st).Valid() {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "unknown state "+quote(st))
			return
		}
		f.States = []domain.SessionState{domain.SessionState(st)}
	}
	ss, err := s.st.ListSessions(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.SessionList{Items: make([]apiv1.Session, 0, len(ss))}
	if len(ss) > p.limit {
		ss = ss[:p.limit]
		out.NextCursor = cursorOf(string(ss[len(ss)-1].ID))
	}
	for _, x := range ss {
		out.Items = append(out.Items, sessionOut(x, nil))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *sessionsRouter) getSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.st.GetSession(r.Context(), pathSession(r))
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

func (s *sessionsRouter) deleteSession(w http.ResponseWriter, r *http.Request) {
	sess, err := s.co.DeleteSession(r.Context(), pathSession(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.URL.Query().Get("wait") != "false" {
		ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
		defer cancel()
		terminal := func(x domain.Session) bool { return x.State.Terminal() }
		if sess, err = s.co.WaitSession(ctx, sess.ID, terminal); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusOK, sessionOut(sess, nil))
}

func sessionOut(s domain.Session, ops []domain.Op) apiv1.Session {
	out := apiv1.Session{
		ID: string(s.ID), State: string(s.State), DesiredState: string(s.DesiredState), HostID: string(s.HostID),
		Epoch: s.Epoch, Reason: s.Reason, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
		HeadSnapshot: string(s.HeadSnapshotID), LastActivity: s.LastActivity,
	}
	spec := s.Spec
	out.Spec = apiv1.SessionSpec{MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: spec.Env, Image: spec.Image, Harness: spec.Harness, IdleTimeoutSec: spec.IdleTimeoutSec, MaxLifetimeSec: spec.MaxLifetimeSec, Egress: spec.Egress}
	for _, o := range ops {
		out.Ops = append(out.Ops, apiv1.Op{ID: o.ID, Kind: o.Kind.Word(), State: string(o.State), Step: o.Step,
			Epoch: o.Epoch, Attempts: o.Attempts, Error: o.Error, CreatedAt: o.CreatedAt, UpdatedAt: o.UpdatedAt})
	}
	return out
}

func snapshotOut(s domain.Snapshot) apiv1.Snapshot {
	return apiv1.Snapshot{ID: string(s.ID), ParentID: string(s.ParentID), HostID: string(s.HostID), Reason: s.Reason, Bytes: s.Bytes, Uploaded: s.Uploaded, CreatedAt: s.CreatedAt}
}

// suspend enqueues an evict and, unless ?wait=false, waits for it to end
// and answers how it did (Session.Suspend): a request may resume the
// session right after its snapshot committed.
func (s *sessionsRouter) suspend(w http.ResponseWriter, r *http.Request) {
	sess, op, err := s.co.Suspend(r.Context(), pathSession(r))
	switch {
	case err != nil:
		s.fail(w, r, err)
		return
	case op.ID == "":
		out := sessionOut(sess, nil)
		out.Suspend = suspendOut(coordinator.AlreadyIdle(sess))
		writeJSON(w, http.StatusOK, out)
		return
	case r.URL.Query().Get("wait") == "false":
		writeJSON(w, http.StatusOK, sessionOut(sess, nil))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WaitTimeout)
	defer cancel()
	done, _, err := s.co.WaitOp(ctx, op)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	o, err := s.co.Outcome(ctx, done)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := sessionOut(o.Session, nil)
	out.Suspend = suspendOut(o)
	writeJSON(w, http.StatusOK, out)
}

func suspendOut(o coordinator.SuspendOutcome) *apiv1.SuspendOutcome {
	return &apiv1.SuspendOutcome{Result: string(o.Result), SnapshotID: string(o.SnapshotID), OpID: o.Op.ID, Why: o.Why}
}

func (s *sessionsRouter) resume(w http.ResponseWriter, r *http.Request) {
	sess, err := s.co.Resume(r.Context(), pathSession(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sessionOut(sess, nil))
}

func (s *sessionsRouter) snapshot(w http.ResponseWriter, r *http.Request) {
	sn, err := s.co.Snapshot(r.Context(), pathSession(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOut(sn))
}

func (s *sessionsRouter) putOutbox(w http.ResponseWriter, r *http.Request) {
	var req apiv1.OutboxRequest
	if !s.decode(w, r, &req) {
		return
	}
	it, err := s.co.PutOutbox(r.Context(), pathSession(r), req.ID, req.Kind, req.Payload)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, outboxOut(it))
}

func (s *sessionsRouter) listOutbox(w http.ResponseWriter, r *http.Request) {
	id := pathSession(r)
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

func outboxOut(it domain.OutboxItem) apiv1.OutboxItem {
	return apiv1.OutboxItem{Seq: it.Seq, ID: it.ID, Kind: it.Kind, Payload: it.Payload, State: string(it.State), CreatedAt: it.CreatedAt}
}

// pathSession is the {id} of a session route.
func pathSession(r *http.Request) domain.SessionID { return domain.SessionID(r.PathValue("id")) }

// ownKey is a caller's idempotency key in the deployment's one key
// space: the owner's, so no caller finds another's session (nor the
// keys engrams makes for tasks' sessions) by naming its key.
func ownKey(o domain.Owner, key string) string {
	if key == "" {
		return ""
	}
	return "user:" + string(o.OrgID) + "/" + string(o.UserID) + "/" + key
}
