package api

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/profiles"
)

// ProfileService keeps profiles and resolves their receipts
// (profiles.Profiles).
// Writes name the caller's organisation; reads the caller as a grantee,
// who sees only the profiles they may use.
type ProfileService interface {
	CreateProfile(ctx context.Context, org domain.OrgID, name string, spec apiv1.ProfileSpec, grants []domain.Grant) (profiles.ProfileView, error)
	Profiles(ctx context.Context, who domain.Grantee) ([]profiles.ProfileView, error)
	Profile(ctx context.Context, who domain.Grantee, nameOrID string) (profiles.ProfileView, error)
	UpdateProfile(ctx context.Context, org domain.OrgID, nameOrID string, edit profiles.ProfileEdit) (profiles.ProfileView, error)
	DeleteProfile(ctx context.Context, org domain.OrgID, nameOrID string) (profiles.ProfileView, error)
	PreviewReceipt(ctx context.Context, org domain.OrgID, spec apiv1.ProfileSpec) (apiv1.Receipt, []string, error)
}

// profilesRouter serves profiles and their grant receipts.
type profilesRouter struct {
	*base
	co ProfileService
}

func (s *profilesRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteCreateProfile, s.createProfile)
	h(apiv1.RouteListProfiles, s.listProfiles)
	h(apiv1.RouteGetProfile, s.getProfile)
	h(apiv1.RouteUpdateProfile, s.updateProfile)
	h(apiv1.RouteDeleteProfile, s.deleteProfile)
	h(apiv1.RoutePreviewReceipt, s.previewReceipt)
}

func (s *profilesRouter) previewReceipt(w http.ResponseWriter, r *http.Request) {
	var req previewReceiptIn
	if !s.decode(w, r, &req) {
		return
	}
	rc, probs, err := s.co.PreviewReceipt(r.Context(), principalFrom(r.Context()).OrgID, req.Spec.spec())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, apiv1.ReceiptPreview{Receipt: receiptOut(rc), Problems: orEmpty(probs)})
}

func (s *profilesRouter) createProfile(w http.ResponseWriter, r *http.Request) {
	var req createProfileIn
	if !s.decode(w, r, &req) {
		return
	}
	v, err := s.co.CreateProfile(r.Context(), principalFrom(r.Context()).OrgID, req.Name, req.Spec.spec(), grantsIn(req.Grants))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, v.Profile.Name)
	writeJSON(w, http.StatusCreated, profileResponse(v))
}

func (s *profilesRouter) listProfiles(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	vs, err := s.co.Profiles(r.Context(), principalFrom(r.Context()).Grantee())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Profile, 0, len(vs))
	for _, v := range vs {
		all = append(all, profileOut(v))
	}
	var out apiv1.ProfileList
	out.Items, out.NextCursor = pageOf(all, func(p apiv1.Profile) string { return p.Name }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *profilesRouter) getProfile(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.Profile(r.Context(), principalFrom(r.Context()).Grantee(), r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileResponse(v))
}

func (s *profilesRouter) updateProfile(w http.ResponseWriter, r *http.Request) {
	var req updateProfileIn
	if !s.decode(w, r, &req) {
		return
	}
	edit := profiles.ProfileEdit{Spec: req.Spec.spec(), Version: req.Version}
	if req.Grants != nil {
		gs := grantsIn(*req.Grants)
		edit.Grants = &gs
	}
	v, err := s.co.UpdateProfile(r.Context(), principalFrom(r.Context()).OrgID, r.PathValue("name"), edit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileResponse(v))
}

func (s *profilesRouter) deleteProfile(w http.ResponseWriter, r *http.Request) {
	v, err := s.co.DeleteProfile(r.Context(), principalFrom(r.Context()).OrgID, r.PathValue("name"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, profileOut(v))
}

func profileOut(v profiles.ProfileView) apiv1.Profile {
	p := v.Profile
	grants := make([]apiv1.Grant, 0, len(p.Grants))
	for _, g := range p.Grants {
		grants = append(grants, apiv1.Grant{Kind: string(g.Kind), Subject: g.Subject})
	}
	return apiv1.Profile{ID: string(p.ID), Name: p.Name, Spec: v.Spec, Grants: grants, Version: p.Version, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, DeletedAt: p.DeletedAt}
}

// profileResponse shows a profile with its receipt; empty lists are [] so
// readers need not tell null from none.
func profileResponse(v profiles.ProfileView) apiv1.ProfileResponse {
	return apiv1.ProfileResponse{Profile: profileOut(v), Receipt: receiptOut(v.Receipt), Problems: v.Problems}
}

// receiptOut is rc with empty lists, never null ones.
func receiptOut(rc apiv1.Receipt) apiv1.Receipt {
	rc.Powers, rc.Hosts, rc.Credentials = orEmpty(rc.Powers), orEmpty(rc.Hosts), orEmpty(rc.Credentials)
	rc.Repos, rc.Env, rc.Skills, rc.Apps = orEmpty(rc.Repos), orEmpty(rc.Env), orEmpty(rc.Skills), orEmpty(rc.Apps)
	return rc
}

// grantsIn is what a request's grants say; the service checks them.
func grantsIn(in []apiv1.Grant) []domain.Grant {
	out := make([]domain.Grant, 0, len(in))
	for _, g := range in {
		out = append(out, domain.Grant{Kind: domain.GrantKind(g.Kind), Subject: g.Subject})
	}
	return out
}
