package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// ProfileClient calls the profile routes. Client.Profiles returns one.
type ProfileClient struct{ c *Client }

// Profiles returns the client of the profile routes.
func (c *Client) Profiles() ProfileClient { return ProfileClient{c} }

// Create validates and stores a profile; the answer carries what it
// grants.
func (pc ProfileClient) Create(ctx context.Context, req apiv1.CreateProfileRequest) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := pc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateProfile, ""), nil, req, &r)
	return r, err
}

// List lists the live profiles by name.
func (pc ProfileClient) List(ctx context.Context) ([]apiv1.Profile, error) {
	return listAll(ctx, pc.c, routePath(apiv1.RouteListProfiles, ""), nil, func(l apiv1.ProfileList) ([]apiv1.Profile, string) { return l.Items, l.NextCursor })
}

// Get returns a profile (by name or id) with its receipt and the
// problems that keep it from starting tasks.
func (pc ProfileClient) Get(ctx context.Context, name string) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := pc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetProfile, name), nil, nil, &r)
	return r, err
}

// Update replaces a profile's spec; req.Version is the one the edit
// was made from (a conflict if the profile changed since).
func (pc ProfileClient) Update(ctx context.Context, name string, req apiv1.UpdateProfileRequest) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := pc.c.call(ctx, http.MethodPut, routePath(apiv1.RouteUpdateProfile, name), nil, req, &r)
	return r, err
}

// Delete deletes a profile; tasks started from it keep their record.
func (pc ProfileClient) Delete(ctx context.Context, name string) (apiv1.Profile, error) {
	var p apiv1.Profile
	err := pc.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteProfile, name), nil, nil, &p)
	return p, err
}
