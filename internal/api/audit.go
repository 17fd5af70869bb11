package api

import (
	"context"
	"net"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
)

// AuditLog is what the auditor writes to.
type AuditLog interface {
	AppendAudit(ctx context.Context, e domain.AuditEvent) error
}

// auditor records each success of an audited route (access.Rule.Action)
// with who did it, to what, when and from where.
type auditor struct {
	*base
	st AuditLog
}

// auditNote is where a handler names the thing it made (a new key's id),
// which the route's path does not.
type auditNote struct{ target string }

type auditNoteKey struct{}

// noteTarget names the thing r's handler made, for the audit log.
func noteTarget(r *http.Request, id string) {
	if n, ok := r.Context().Value(auditNoteKey{}).(*auditNote); ok {
		n.target = id
	}
}

// wrap records next's successes when rule is audited. Replays of an
// Idempotency-Key are not new actions.
func (a *auditor) wrap(rule access.Rule, next http.Handler) http.Handler {
	if rule.Action == "" || a.st == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		note := &auditNote{}
		r = r.WithContext(context.WithValue(r.Context(), auditNoteKey{}, note))
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status < 200 || rec.status > 299 || rec.Header().Get(apiv1.HeaderIdempotentReplayed) != "" {
			return
		}
		target := note.target
		for _, k := range []string{"id", "name", "kind"} {
			if v := r.PathValue(k); target == "" && v != "" {
				target = v
			}
		}
		p := principalFrom(r.Context())
		e := domain.AuditEvent{ID: a.newID(), OrgID: p.OrgID, ActorKind: p.ActorKind(), ActorID: p.ActorID(), ActorName: p.Name,
			KeyID: p.KeyID, Action: rule.Action, TargetKind: rule.Target, TargetID: target, Status: rec.status,
			Remote: remoteHost(r), At: a.now()}
		if rule.Need == access.Fleet {
			e.OrgID = "" // the deployment's log: hosts are no organisation's
		}
		if err := a.st.AppendAudit(context.WithoutCancel(r.Context()), e); err != nil {
			a.log.Error("record an audit event", "action", e.Action, "target_id", e.TargetID, "err", err)
		}
	})
}

func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController and writeSecret reach the writer below.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
