package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
)

// PeopleClient calls the who-am-I, members and audit routes. Client.People
// returns one.
type PeopleClient struct{ c *Client }

// People returns the client of the who-am-I, members and audit routes.
func (c *Client) People() PeopleClient { return PeopleClient{c} }

// WhoAmI says who the client's key acts as.
func (pc PeopleClient) WhoAmI(ctx context.Context) (apiv1.WhoAmI, error) {
	var r apiv1.WhoAmI
	err := pc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteWhoAmI, ""), nil, nil, &r)
	return r, err
}

// Members lists the organisation's members.
func (pc PeopleClient) Members(ctx context.Context) ([]apiv1.Member, error) {
	return listAll(ctx, pc.c, routePath(apiv1.RouteListMembers, ""), nil, func(l apiv1.MemberList) ([]apiv1.Member, string) { return l.Items, l.NextCursor })
}

// AddMember adds a person by email with a role.
func (pc PeopleClient) AddMember(ctx context.Context, req apiv1.AddMemberRequest) (apiv1.Member, error) {
	var r apiv1.Member
	err := pc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteAddMember, ""), nil, req, &r)
	return r, err
}

// SetRole changes a member's role.
func (pc PeopleClient) SetRole(ctx context.Context, userID, role string) (apiv1.Member, error) {
	var r apiv1.Member
	err := pc.c.call(ctx, http.MethodPut, routePath(apiv1.RouteSetMember, userID), nil, apiv1.SetMemberRequest{Role: role}, &r)
	return r, err
}

// SetGroups replaces the groups a member is in.
func (pc PeopleClient) SetGroups(ctx context.Context, userID string, groups []string) (apiv1.Member, error) {
	var r apiv1.Member
	groups = append([]string{}, groups...) // [] for none, never null
	err := pc.c.call(ctx, http.MethodPut, routePath(apiv1.RouteSetMember, userID), nil, apiv1.SetMemberRequest{Groups: &groups}, &r)
	return r, err
}

// RemoveMember removes a member (their personal keys are revoked).
func (pc PeopleClient) RemoveMember(ctx context.Context, userID string) error {
	return pc.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteRemoveMember, userID), nil, nil, nil)
}

// Audit reads one page of the audit log, newest first: limit events after
// cursor ("" for the newest); fleet reads the hosts' log.
func (pc PeopleClient) Audit(ctx context.Context, limit int, cursor string, fleet bool) (apiv1.AuditList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if fleet {
		q.Set("fleet", "true")
	}
	var r apiv1.AuditList
	err := pc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteListAudit, ""), q, nil, &r)
	return r, err
}

// Identities lists the caller's accounts in the integrations.
func (pc PeopleClient) Identities(ctx context.Context) ([]apiv1.Identity, error) {
	var r apiv1.IdentityList
	err := pc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteListIdentities), nil, nil, &r)
	return r.Items, err
}

// LinkIdentity makes a link code for an integration (kind "slack" or
// "linear"; GitHub's needs the login: LinkAccount).
func (pc PeopleClient) LinkIdentity(ctx context.Context, kind string) (apiv1.IdentityLink, error) {
	return pc.LinkAccount(ctx, apiv1.LinkIdentityRequest{Kind: kind})
}

// LinkAccount makes a link code for an integration's account (req.Account:
// the GitHub login that is to say it).
func (pc PeopleClient) LinkAccount(ctx context.Context, req apiv1.LinkIdentityRequest) (apiv1.IdentityLink, error) {
	var r apiv1.IdentityLink
	err := pc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteLinkIdentity), nil, req, &r)
	return r, err
}

// UnlinkIdentity makes an account no longer act as the caller.
func (pc PeopleClient) UnlinkIdentity(ctx context.Context, kind, account string) error {
	return pc.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteUnlinkIdentity, kind, account), nil, nil, nil)
}
