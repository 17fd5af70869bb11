package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// FleetStore keeps hosts and tokens (the store satisfies it).
type FleetStore interface {
	GetHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	ListHosts(ctx context.Context) ([]domain.Host, error)
	SetHostDraining(ctx context.Context, id domain.HostID, draining bool) error
	CreateHost(ctx context.Context, h domain.Host, tok domain.Token) error
}

// HostAdmin changes who may work (the coordinator): each closes the host's
// link on whichever replica holds it and hands its sessions to recovery.
type HostAdmin interface {
	DisableHost(ctx context.Context, id domain.HostID, disabled bool) (domain.Host, error)
	DeleteHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	RevokeToken(ctx context.Context, id string) error
}

// hostsRouter serves the fleet: hosts and their tokens.
type hostsRouter struct {
	*base
	st    FleetStore
	admin HostAdmin
}

func (s *hostsRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteListHosts, s.listHosts)
	h(apiv1.RouteGetHost, s.getHost)
	h(apiv1.RouteDrainHost, s.drainHost(true))
	h(apiv1.RouteUndrainHost, s.drainHost(false))
	h(apiv1.RouteDisableHost, s.disableHost(true))
	h(apiv1.RouteEnableHost, s.disableHost(false))
	h(apiv1.RouteDeleteHost, s.deleteHost)
	h(apiv1.RouteCreateHost, s.createHost)
}

func (s *hostsRouter) listHosts(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	hs, err := s.st.ListHosts(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Host, 0, len(hs))
	for _, h := range hs {
		if h.DeletedAt.IsZero() {
			all = append(all, hostOut(h))
		}
	}
	var out apiv1.HostList
	out.Items, out.NextCursor = pageOf(all, func(h apiv1.Host) string { return h.Name + "\x00" + h.ID }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *hostsRouter) getHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.host(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, hostOut(h))
}

// host reads the host the path names by id, or by the name of a host that
// is not deleted.
func (s *hostsRouter) host(r *http.Request) (domain.Host, error) {
	ref := r.PathValue("id")
	h, err := s.st.GetHost(r.Context(), domain.HostID(ref))
	if !errors.Is(err, domain.ErrNotFound) {
		return h, err
	}
	hs, lerr := s.st.ListHosts(r.Context())
	if lerr != nil {
		return domain.Host{}, lerr
	}
	for _, h := range hs {
		if h.Name == ref && h.DeletedAt.IsZero() {
			return h, nil
		}
	}
	return domain.Host{}, fmt.Errorf("host %s: %w (list hosts with `engrams host list`)", ref, domain.ErrNotFound)
}

// drainHost sets or clears the host's drain flag (admin intent, kept
// across reconnects and loss): a connected host moves to draining (or
// ready) now, a new or lost one when it registers or comes back.
func (s *hostsRouter) drainHost(draining bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h, err := s.host(r)
		if err == nil && !h.DeletedAt.IsZero() {
			err = fmt.Errorf("host %s was deleted: %w", h.ID, domain.ErrNotFound)
		}
		if err == nil {
			err = s.st.SetHostDraining(r.Context(), h.ID, draining)
		}
		if err == nil {
			h, err = s.st.GetHost(r.Context(), h.ID)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, hostOut(h))
	}
}

func (s *hostsRouter) disableHost(disabled bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h, err := s.host(r)
		if err == nil && !h.DeletedAt.IsZero() {
			err = fmt.Errorf("host %s was deleted: %w", h.ID, domain.ErrNotFound)
		}
		if err == nil {
			h, err = s.admin.DisableHost(r.Context(), h.ID, disabled)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, hostOut(h))
	}
}

func (s *hostsRouter) deleteHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.host(r)
	if err == nil {
		h, err = s.admin.DeleteHost(r.Context(), h.ID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, hostOut(h))
}

func (s *hostsRouter) createHost(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateHostRequest
	if !s.decode(w, r, &req) {
		return
	}
	if msg := access.CheckName(req.Name); msg != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "host "+msg)
		return
	}
	secret, prefix := access.NewSecret()
	now := s.now()
	h := domain.Host{ID: domain.HostID(s.newID()), Name: req.Name, State: domain.HostNew, CreatedAt: now}
	t := domain.Token{ID: s.newID(), Name: "host " + req.Name, Kind: domain.TokenHost, HostID: h.ID, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: now}
	if err := s.st.CreateHost(r.Context(), h, t); err != nil {
		s.fail(w, r, err)
		return
	}
	writeSecret(w, http.StatusCreated, apiv1.CreateHostResponse{Host: hostOut(h), Token: secret})
}

func hostOut(h domain.Host) apiv1.Host {
	state := string(h.State)
	switch {
	case !h.DeletedAt.IsZero():
		state = "deleted"
	case h.Disabled:
		state = "disabled"
	}
	out := apiv1.Host{ID: string(h.ID), Name: h.Name, State: state, Draining: h.Draining, Facts: *hostFactsOut(&h.Facts), Capacity: capacityOut(h.Capacity),
		ReplicaID: h.ReplicaID, LastHeartbeat: h.LastHeartbeat, CreatedAt: h.CreatedAt, DeletedAt: h.DeletedAt}
	if h.Link.ID != "" {
		out.ConnectedFrom = h.Link.Remote
	}
	return out
}
