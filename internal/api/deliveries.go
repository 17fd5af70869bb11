package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/intake"
)

// Intake takes the deliveries of integrations and signed webhooks: read
// bounded, then verified, deduplicated, admitted and started
// (intake.Pipeline).
type Intake interface {
	Read(w http.ResponseWriter, r *http.Request, src connector.Source) (connector.Request, error)
	Deliver(ctx context.Context, src connector.Source, req connector.Request) (intake.Outcome, error)
}

// deliveriesRouter serves the public delivery routes: each a source of
// the one pipeline.
type deliveriesRouter struct {
	*base
	in   Intake
	runs AutomationRuns // a hook's answer is its run
}

func (s *deliveriesRouter) route(public func(string, http.HandlerFunc)) {
	public(apiv1.RouteHook, s.receive(connector.SourceHook))
	public(apiv1.RouteSlackEvents, s.receive(connector.SourceSlack))
	public(apiv1.RouteGitHubEvents, s.receive(connector.SourceGitHub))
	public(apiv1.RouteLinearEvents, s.receive(connector.SourceLinear))
}

// receive takes one delivery of src. Every refusal of a signature (an
// unknown hook's included) is the same 401.
func (s *deliveriesRouter) receive(src connector.Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.in == nil {
			writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this server takes no deliveries (it runs no automations)")
			return
		}
		req, err := s.in.Read(w, r, src)
		if err == nil {
			var out intake.Outcome
			if out, err = s.in.Deliver(r.Context(), src, req); err == nil {
				s.answer(w, r, src, out)
				return
			}
		}
		s.refuse(w, r, src, err)
	}
}

func (s *deliveriesRouter) refuse(w http.ResponseWriter, r *http.Request, src connector.Source, err error) {
	var ref *intake.Refusal
	switch {
	case errors.As(err, &ref):
		code := map[int]string{http.StatusRequestEntityTooLarge: apiv1.CodeTooLarge, http.StatusRequestTimeout: apiv1.CodeTimeout,
			http.StatusRequestHeaderFieldsTooLarge: apiv1.CodeTooLarge, http.StatusNotFound: apiv1.CodeNotFound}[ref.Status]
		if code == "" {
			code = apiv1.CodeBadRequest
		}
		w.Header().Set("Connection", "close")
		writeError(w, ref.Status, code, "a "+string(src)+" delivery: "+ref.Msg)
	case errors.Is(err, connector.ErrBadSignature), errors.Is(err, connector.ErrNotConfigured):
		// An integration not configured cannot verify anything: refused the
		// same way, so the route tells no caller what is configured.
		s.log.Info("delivery refused", "source", src, "path", bounded(r.URL.Path), "err", err)
		writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, "the delivery's signature or timestamp was refused")
	case errors.Is(err, intake.ErrNoRuns):
		writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, err.Error())
	case errors.Is(err, domain.ErrInvalid), errors.Is(err, domain.ErrNotActive):
		s.fail(w, r, err) // said after the signature checked: the sender's own
	default:
		// The caller is not authenticated by a token: the log says why.
		s.log.Error("delivery failed", "source", src, "err", err)
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "the delivery could not be taken; the coordinator's log says why")
	}
}

// answer says what a delivery did: a hook's run (202 new, 200 seen
// before), an integration's answer (Slack's challenge, GitHub's pong) or
// how many runs it started.
func (s *deliveriesRouter) answer(w http.ResponseWriter, r *http.Request, src connector.Source, out intake.Outcome) {
	switch {
	case out.Answer != nil:
		writeJSON(w, http.StatusOK, out.Answer)
	case src == connector.SourceHook && len(out.Runs) > 0 && s.runs != nil:
		st := out.Runs[0]
		d, err := s.runs.RunDetail(r.Context(), st.Run.Org, st.Run.ID) // the signed hook's own run
		if err != nil {
			s.fail(w, r, err)
			return
		}
		status := http.StatusAccepted
		if !st.Created {
			status = http.StatusOK
		}
		writeJSON(w, status, apiv1.RunResponse{Run: runOut(d.Run, d.Name), Duplicate: !st.Created})
	case out.Duplicate:
		writeJSON(w, http.StatusOK, map[string]bool{"duplicate": true})
	case out.Ignored != "" && len(out.Runs) == 0:
		writeJSON(w, http.StatusOK, map[string]string{"ignored": out.Ignored})
	default:
		writeJSON(w, http.StatusOK, map[string]int{"runs": len(out.Runs)})
	}
}
