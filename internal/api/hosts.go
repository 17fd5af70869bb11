package api

import (
	"context"
	"net/http"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// FleetStore keeps hosts and tokens (the store satisfies it).
type FleetStore interface {
	GetHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	ListHosts(ctx context.Context) ([]domain.Host, error)
	SetHostState(ctx context.Context, id domain.HostID, state domain.HostState) error
	CreateHost(ctx context.Context, h domain.Host, tok domain.Token) error
	CreateToken(ctx context.Context, t domain.Token) error
	TokenByHash(ctx context.Context, hash string) (domain.Token, error)
	ListTokens(ctx context.Context) ([]domain.Token, error)
	RevokeToken(ctx context.Context, id string, at time.Time) error
}

// hostsRouter serves the fleet: hosts, their tokens and the users' API
// tokens, and authenticates every request.
type hostsRouter struct {
	*base
	st FleetStore
}

func (s *hostsRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteListHosts, s.listHosts)
	h(apiv1.RouteGetHost, s.getHost)
	h(apiv1.RouteDrainHost, s.drainHost)
	h(apiv1.RouteCreateHost, s.createHost)
	h(apiv1.RouteCreateToken, s.createToken)
	h(apiv1.RouteListTokens, s.listTokens)
	h(apiv1.RouteRevokeToken, s.revokeToken)
}

func (s *hostsRouter) listHosts(w http.ResponseWriter, r *http.Request) {
	hs, err := s.st.ListHosts(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.HostList{Hosts: make([]apiv1.Host, 0, len(hs))}
	for _, h := range hs {
		out.Hosts = append(out.Hosts, hostOut(h))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *hostsRouter) getHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.st.GetHost(r.Context(), domain.HostID(r.PathValue("id")))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, hostOut(h))
}

func (s *hostsRouter) drainHost(w http.ResponseWriter, r *http.Request) {
	id := domain.HostID(r.PathValue("id"))
	if err := s.st.SetHostState(r.Context(), id, domain.HostDraining); err != nil {
		s.fail(w, r, err)
		return
	}
	s.getHost(w, r)
}

func (s *hostsRouter) createHost(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateHostRequest
	if !s.decode(w, r, &req) {
		return
	}
	if msg := checkName(req.Name); msg != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "host "+msg)
		return
	}
	secret, prefix := NewSecret()
	now := s.now()
	h := domain.Host{ID: domain.HostID(s.newID()), Name: req.Name, State: domain.HostNew, CreatedAt: now}
	t := domain.Token{ID: s.newID(), Name: "host " + req.Name, Kind: domain.TokenHost, HostID: h.ID, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: now}
	if err := s.st.CreateHost(r.Context(), h, t); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, apiv1.CreateHostResponse{Host: hostOut(h), Token: secret})
}

func hostOut(h domain.Host) apiv1.Host {
	return apiv1.Host{ID: string(h.ID), Name: h.Name, State: string(h.State), Facts: *hostFactsOut(&h.Facts), Capacity: capacityOut(h.Capacity),
		ReplicaID: h.ReplicaID, LastHeartbeat: h.LastHeartbeat, CreatedAt: h.CreatedAt}
}
