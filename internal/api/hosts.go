package api

import (
	"encoding/json"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/store"
)

func (s *Server) listHosts(w http.ResponseWriter, r *http.Request) {
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

func (s *Server) getHost(w http.ResponseWriter, r *http.Request) {
	h, err := s.st.GetHost(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, hostOut(h))
}

func (s *Server) drainHost(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := s.st.SetHostState(r.Context(), id, store.HostDraining); err != nil {
		s.fail(w, r, err)
		return
	}
	s.getHost(w, r)
}

func (s *Server) createHost(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateHostRequest
	if !s.decode(w, r, &req) {
		return
	}
	if msg := checkName(req.Name); msg != "" {
		writeError(w, http.StatusBadRequest, "bad_request", "host "+msg)
		return
	}
	secret, prefix := NewSecret()
	now := s.now()
	h := store.Host{ID: s.newID(), Name: req.Name, State: store.HostNew, CreatedAt: now}
	t := store.Token{ID: s.newID(), Name: "host " + req.Name, Kind: store.TokenHost, HostID: h.ID, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: now}
	if err := s.st.CreateHost(r.Context(), h, t); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, apiv1.CreateHostResponse{Host: hostOut(h), Token: secret})
}

func hostOut(h store.Host) apiv1.Host {
	out := apiv1.Host{ID: h.ID, Name: h.Name, State: string(h.State), ReplicaID: h.ReplicaID, LastHeartbeat: h.LastHeartbeat, CreatedAt: h.CreatedAt}
	if len(h.Facts) > 0 {
		_ = json.Unmarshal(h.Facts, &out.Facts)
	}
	if len(h.Capacity) > 0 {
		_ = json.Unmarshal(h.Capacity, &out.Capacity)
	}
	return out
}
