package clienttest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/engrams/engrams/api/apiv1"
)

// adminFake serves the host and token routes.
type adminFake struct{ *Server }

func (s adminFake) routes(auth func(string, http.HandlerFunc)) {
	auth(apiv1.RouteListHosts, s.listHosts)
	auth(apiv1.RouteGetHost, s.withHost(func(w http.ResponseWriter, r *http.Request, h *apiv1.Host) { writeJSON(w, 200, h) }))
	auth(apiv1.RouteDrainHost, s.withHost(s.drainHost))
	auth(apiv1.RouteUndrainHost, s.withHost(s.undrainHost))
	auth(apiv1.RouteDisableHost, s.withHost(s.setHostState("disabled")))
	auth(apiv1.RouteEnableHost, s.withHost(s.setHostState("ready")))
	auth(apiv1.RouteDeleteHost, s.withHost(s.setHostState("deleted")))
	auth(apiv1.RouteCreateHost, s.createHost)
	auth(apiv1.RouteCreateToken, s.createToken)
	auth(apiv1.RouteListTokens, s.listTokens)
	auth(apiv1.RouteRevokeToken, s.revokeToken)
}

func (s adminFake) listHosts(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := apiv1.HostList{Items: []apiv1.Host{}}
	for _, h := range s.hosts {
		if h.State != "deleted" {
			out.Items = append(out.Items, *h)
		}
	}
	writeJSON(w, 200, out)
}

func (s adminFake) withHost(h func(http.ResponseWriter, *http.Request, *apiv1.Host)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, host := range s.hosts {
			if host.ID == r.PathValue("id") || (host.Name == r.PathValue("id") && host.State != "deleted") {
				h(w, r, host)
				return
			}
		}
		writeErr(w, 404, "not_found", fmt.Sprintf("host %s not found", r.PathValue("id")))
	}
}

// drainHost sets the drain flag as the real API does: a ready host drains
// now, a new or lost one keeps its state until it connects.
func (s adminFake) drainHost(w http.ResponseWriter, r *http.Request, h *apiv1.Host) {
	switch h.State {
	case "deleted":
		writeErr(w, 404, "not_found", fmt.Sprintf("host %s was deleted", h.ID))
		return
	case "ready":
		h.State = "draining"
	}
	h.Draining = true
	writeJSON(w, 200, h)
}

// undrainHost clears the drain flag: a draining host is ready again.
func (s adminFake) undrainHost(w http.ResponseWriter, r *http.Request, h *apiv1.Host) {
	switch h.State {
	case "deleted":
		writeErr(w, 404, "not_found", fmt.Sprintf("host %s was deleted", h.ID))
		return
	case "draining":
		h.State = "ready"
	}
	h.Draining = false
	writeJSON(w, 200, h)
}

// setHostState answers disable, enable and delete (a deleted host stays
// found by id, as the real API does, but takes no more changes).
func (s adminFake) setHostState(state string) func(http.ResponseWriter, *http.Request, *apiv1.Host) {
	return func(w http.ResponseWriter, r *http.Request, h *apiv1.Host) {
		if h.State == "deleted" {
			writeErr(w, 404, "not_found", fmt.Sprintf("host %s was deleted", h.ID))
			return
		}
		h.State = state
		if state == "deleted" {
			h.DeletedAt = BaseTime()
		}
		writeJSON(w, 200, h)
	}
}

func (s adminFake) createHost(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateHostRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		writeErr(w, 400, "bad_request", "name is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &apiv1.Host{ID: fmt.Sprintf("h%d", len(s.hosts)+1), Name: req.Name, State: "new", CreatedAt: BaseTime()}
	s.hosts = append(s.hosts, h)
	writeJSON(w, 201, apiv1.CreateHostResponse{Host: *h, Token: "engrams_host_" + req.Name})
}

func (s adminFake) createToken(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateTokenRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Name == "" {
		writeErr(w, 400, "bad_request", "name is required")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok := &apiv1.Token{ID: fmt.Sprintf("t%d", len(s.tokens)+1), Name: req.Name, Kind: "user", Prefix: "engrams_" + req.Name[:1], CreatedAt: BaseTime()}
	s.tokens = append(s.tokens, tok)
	writeJSON(w, 201, apiv1.CreateTokenResponse{Token: *tok, Secret: "engrams_secret_" + req.Name})
}

func (s adminFake) listTokens(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := apiv1.TokenList{Items: []apiv1.Token{}}
	for _, t := range s.tokens {
		out.Items = append(out.Items, *t)
	}
	writeJSON(w, 200, out)
}

func (s adminFake) revokeToken(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range s.tokens {
		if t.ID == r.PathValue("id") {
			s.tokens = slices.Delete(s.tokens, i, i+1)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	writeErr(w, 404, "not_found", fmt.Sprintf("token %s not found", r.PathValue("id")))
}
