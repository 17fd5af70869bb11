package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// CreateProfile validates and stores a profile; the answer carries what it
// grants.
func (c *Client) CreateProfile(ctx context.Context, req apiv1.CreateProfileRequest) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := c.call(ctx, http.MethodPost, routePath(apiv1.RouteCreateProfile, ""), nil, req, &r)
	return r, err
}

// ListProfiles lists the live profiles by name.
func (c *Client) ListProfiles(ctx context.Context) ([]apiv1.Profile, error) {
	var l apiv1.ProfileList
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteListProfiles, ""), nil, nil, &l)
	return l.Profiles, err
}

// GetProfile returns a profile (by name or id) with its receipt and the
// problems that keep it from starting tasks.
func (c *Client) GetProfile(ctx context.Context, name string) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetProfile, name), nil, nil, &r)
	return r, err
}

// UpdateProfile replaces a profile's spec; req.Version is the one the edit
// was made from (a conflict if the profile changed since).
func (c *Client) UpdateProfile(ctx context.Context, name string, req apiv1.UpdateProfileRequest) (apiv1.ProfileResponse, error) {
	var r apiv1.ProfileResponse
	err := c.call(ctx, http.MethodPut, routePath(apiv1.RouteUpdateProfile, name), nil, req, &r)
	return r, err
}

// DeleteProfile deletes a profile; tasks started from it keep their record.
func (c *Client) DeleteProfile(ctx context.Context, name string) (apiv1.Profile, error) {
	var p apiv1.Profile
	err := c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDeleteProfile, name), nil, nil, &p)
	return p, err
}
