package api

import (
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
)

func (s *Server) createProfile(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateProfileRequest
	if !s.decode(w, r, &req) {
		return
	}
	v, err := s.co.CreateProfile(r.Context(), req.Name, req.Spec)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, profileResponse(v))
}

func (s *Server) listProfiles(w http.ResponseWriter, r *http.Request) {
	vs, err := s.co.Profiles(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.ProfileList{Profiles: make([]apiv1.Profile, 0, len(vs))}
	for _, v := range vs {
		out.Profiles = append(out.Profiles, profileOut(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getProfile(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Profile(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileResponse(v))
}

func (s *Server) updateProfile(w http.ResponseWriter, r *http.Request) {
	var req apiv1.UpdateProfileRequest
	if !s.decode(w, r, &req) {
		return
	}
	v, err := s.co.UpdateProfile(r.Context(), r.PathValue("name"), req.Spec, req.Version)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileResponse(v))
}

func (s *Server) deleteProfile(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DeleteProfile(r.Context(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileOut(v))
}

func profileOut(v coordinator.ProfileView) apiv1.Profile {
	p := v.Profile
	return apiv1.Profile{ID: p.ID, Name: p.Name, Spec: v.Spec, Version: p.Version, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, DeletedAt: p.DeletedAt}
}

// profileResponse shows a profile with its receipt; empty lists are [] so
// readers need not tell null from none.
func profileResponse(v coordinator.ProfileView) apiv1.ProfileResponse {
	rc := v.Receipt
	rc.Powers, rc.Hosts, rc.Credentials = orEmpty(rc.Powers), orEmpty(rc.Hosts), orEmpty(rc.Credentials)
	rc.Repos, rc.Env, rc.Skills, rc.Apps = orEmpty(rc.Repos), orEmpty(rc.Env), orEmpty(rc.Skills), orEmpty(rc.Apps)
	return apiv1.ProfileResponse{Profile: profileOut(v), Receipt: rc, Problems: v.Problems}
}
