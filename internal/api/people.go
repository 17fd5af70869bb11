package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
)

// PeopleStore is what the members, audit and who-am-I routes use of the
// store.
type PeopleStore interface {
	GetOrg(ctx context.Context, id domain.OrgID) (domain.Org, error)
	CreateUser(ctx context.Context, u domain.User) error
	UserByEmail(ctx context.Context, email string) (domain.User, error)
	PutMember(ctx context.Context, org domain.OrgID, user domain.UserID, role domain.Role, at time.Time) error
	SetMemberGroups(ctx context.Context, org domain.OrgID, user domain.UserID, groups []string) error
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
	ListMembers(ctx context.Context, org domain.OrgID) ([]domain.Member, error)
	RemoveMember(ctx context.Context, org domain.OrgID, user domain.UserID, at time.Time) error
	ListAudit(ctx context.Context, org domain.OrgID, before *domain.AuditEvent, limit int) ([]domain.AuditEvent, error)
}

// peopleRouter serves the caller's identity, the organisation's members
// and its audit log.
type peopleRouter struct {
	*base
	st PeopleStore
}

func (s *peopleRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteWhoAmI, s.whoAmI)
	h(apiv1.RouteListMembers, s.listMembers)
	h(apiv1.RouteAddMember, s.addMember)
	h(apiv1.RouteSetMember, s.setMember)
	h(apiv1.RouteRemoveMember, s.removeMember)
	h(apiv1.RouteListAudit, s.listAudit)
}

func (s *peopleRouter) whoAmI(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	out := apiv1.WhoAmI{UserID: string(p.UserID), Name: p.Name, OrgID: string(p.OrgID), Role: string(p.Role),
		FleetOperator: p.Fleet, KeyID: p.KeyID, KeyKind: apiv1.KeyPersonal}
	if p.Service {
		out.KeyKind, out.UserID = apiv1.KeyService, ""
	}
	if p.OrgID != "" {
		o, err := s.st.GetOrg(r.Context(), p.OrgID)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.OrgName = o.Name
	}
	writeJSON(w, http.StatusOK, out)
}

func memberOut(m domain.Member) apiv1.Member {
	return apiv1.Member{UserID: string(m.User.ID), Email: m.User.Email, Name: m.User.Name, Role: string(m.Role),
		Groups: append([]string{}, m.Groups...), FleetOperator: m.User.FleetOperator, AddedAt: m.CreatedAt}
}

func (s *peopleRouter) listMembers(w http.ResponseWriter, r *http.Request) {
	pg, ok := readPage(w, r)
	if !ok {
		return
	}
	ms, err := s.st.ListMembers(r.Context(), principalFrom(r.Context()).OrgID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := make([]apiv1.Member, 0, len(ms))
	for _, m := range ms {
		all = append(all, memberOut(m))
	}
	var out apiv1.MemberList
	out.Items, out.NextCursor = pageOf(all, func(m apiv1.Member) string { return timeKey(m.AddedAt) + m.UserID }, pg)
	writeJSON(w, http.StatusOK, out)
}

// grantable is the role req names, if p may give it.
func grantable(p access.Principal, role string) (domain.Role, error) {
	r := domain.Role(role)
	if !r.Valid() {
		return "", invalid("role " + quote(role) + ": want member, admin or owner")
	}
	if !p.Role.AtLeast(r) {
		return "", forbidden("you may give a role up to yours (" + string(p.Role) + ")")
	}
	return r, nil
}

func (s *peopleRouter) addMember(w http.ResponseWriter, r *http.Request) {
	var req apiv1.AddMemberRequest
	if !s.decode(w, r, &req) {
		return
	}
	p := principalFrom(r.Context())
	m, err := s.add(r.Context(), p, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, string(m.User.ID))
	writeJSON(w, http.StatusCreated, memberOut(m))
}

func (s *peopleRouter) add(ctx context.Context, p access.Principal, req apiv1.AddMemberRequest) (domain.Member, error) {
	role, err := grantable(p, req.Role)
	if err != nil {
		return domain.Member{}, err
	}
	addr, err := mail.ParseAddress(req.Email)
	if err != nil || addr.Name != "" || len(req.Email) > 254 || len(req.Name) > 200 {
		return domain.Member{}, invalid("email " + quote(req.Email) + ": want a plain address such as ada@example.com")
	}
	email := strings.ToLower(addr.Address)
	u, err := s.st.UserByEmail(ctx, email)
	if errors.Is(err, domain.ErrNotFound) {
		u = domain.User{ID: domain.UserID(s.newID()), Email: email, Name: req.Name, CreatedAt: s.now()}
		err = s.st.CreateUser(ctx, u)
	}
	if err != nil {
		return domain.Member{}, err
	}
	if _, err := s.st.GetMember(ctx, p.OrgID, u.ID); err == nil {
		return domain.Member{}, fmt.Errorf("%s is already a member: %w (change their role instead)", email, domain.ErrConflict)
	}
	if err := s.st.PutMember(ctx, p.OrgID, u.ID, role, s.now()); err != nil {
		return domain.Member{}, err
	}
	return s.st.GetMember(ctx, p.OrgID, u.ID)
}

// target is the member r names, if p may change them: an admin may not
// change an owner.
func (s *peopleRouter) target(r *http.Request, p access.Principal) (domain.Member, error) {
	m, err := s.st.GetMember(r.Context(), p.OrgID, domain.UserID(r.PathValue("id")))
	if err != nil {
		return m, err
	}
	if !p.Role.AtLeast(m.Role) {
		return m, forbidden("only an owner may change an owner")
	}
	return m, nil
}

// lastOwner refuses to leave the organisation without an owner.
func (s *peopleRouter) lastOwner(ctx context.Context, m domain.Member) error {
	if m.Role != domain.RoleOwner {
		return nil
	}
	ms, err := s.st.ListMembers(ctx, m.OrgID)
	if err != nil {
		return err
	}
	for _, o := range ms {
		if o.Role == domain.RoleOwner && o.User.ID != m.User.ID {
			return nil
		}
	}
	return fmt.Errorf("%w: the organisation's last owner stays one: make another owner first", domain.ErrConflict)
}

func (s *peopleRouter) setMember(w http.ResponseWriter, r *http.Request) {
	var req apiv1.SetMemberRequest
	if !s.decode(w, r, &req) {
		return
	}
	p := principalFrom(r.Context())
	m, err := s.target(r, p)
	role := m.Role
	if err == nil && req.Role == "" && req.Groups == nil {
		err = invalid("send a role, groups or both")
	}
	if err == nil && req.Groups != nil {
		if gerr := domain.CheckGroups(*req.Groups); gerr != nil {
			err = invalid("groups: " + gerr.Error())
		}
	}
	if err == nil && req.Role != "" {
		role, err = grantable(p, req.Role)
	}
	if err == nil && role != domain.RoleOwner {
		err = s.lastOwner(r.Context(), m)
	}
	if err == nil && role != m.Role {
		err = s.st.PutMember(r.Context(), p.OrgID, m.User.ID, role, s.now())
	}
	if err == nil && req.Groups != nil {
		err = s.st.SetMemberGroups(r.Context(), p.OrgID, m.User.ID, *req.Groups)
		m.Groups = *req.Groups
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	m.Role = role
	writeJSON(w, http.StatusOK, memberOut(m))
}

func (s *peopleRouter) removeMember(w http.ResponseWriter, r *http.Request) {
	p := principalFrom(r.Context())
	m, err := s.target(r, p)
	if err == nil {
		err = s.lastOwner(r.Context(), m)
	}
	if err == nil {
		err = s.st.RemoveMember(r.Context(), p.OrgID, m.User.ID, s.now())
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listAudit pages the audit log an admin's organisation keeps, or with
// ?fleet=true the deployment's (hosts) for a fleet operator.
func (s *peopleRouter) listAudit(w http.ResponseWriter, r *http.Request) {
	pg, ok := readPage(w, r)
	if !ok {
		return
	}
	p := principalFrom(r.Context())
	org := p.OrgID
	if r.URL.Query().Get("fleet") == "true" {
		if !p.Fleet {
			s.fail(w, r, forbidden("the fleet's audit log is for fleet operators"))
			return
		}
		org = ""
	} else if !p.Allows(access.Admin) {
		s.fail(w, r, forbidden("the audit log is for the organisation's admins"))
		return
	}
	var before *domain.AuditEvent
	if pg.after != "" {
		at, id, ok := strings.Cut(pg.after, "/")
		n, err := strconv.ParseInt(at, 10, 64)
		if !ok || err != nil {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "cursor: not a list's next_cursor")
			return
		}
		before = &domain.AuditEvent{ID: id, At: time.UnixMicro(n)}
	}
	es, err := s.st.ListAudit(r.Context(), org, before, pg.limit+1)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.AuditList{Items: []apiv1.AuditEvent{}}
	for i, e := range es {
		if i == pg.limit {
			last := es[i-1]
			out.NextCursor = cursorOf(strconv.FormatInt(last.At.UnixMicro(), 10) + "/" + last.ID)
			break
		}
		out.Items = append(out.Items, apiv1.AuditEvent{ID: e.ID, At: e.At, ActorKind: e.ActorKind, ActorID: e.ActorID,
			ActorName: e.ActorName, KeyID: e.KeyID, Action: e.Action, TargetKind: e.TargetKind, TargetID: e.TargetID,
			Status: e.Status, Remote: e.Remote})
	}
	writeJSON(w, http.StatusOK, out)
}

// IdentityStore keeps the caller's accounts in the integrations and the
// link codes they make (the store).
type IdentityStore interface {
	ListIdentities(ctx context.Context, org domain.OrgID, user domain.UserID) ([]domain.Identity, error)
	GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error)
	DeleteIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) error
	CreateIdentityCode(ctx context.Context, c domain.IdentityCode) error
}

// identityCodeTTL is how long a link code may be said.
const identityCodeTTL = 15 * time.Minute

// identitiesRouter serves the caller's own accounts in the integrations.
type identitiesRouter struct {
	*base
	st IdentityStore
}

func (s *identitiesRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteListIdentities, s.list)
	h(apiv1.RouteLinkIdentity, s.link)
	h(apiv1.RouteUnlinkIdentity, s.unlink)
}

// person is the caller, when this server keeps accounts.
func (s *identitiesRouter) person(w http.ResponseWriter, r *http.Request) (access.Principal, bool) {
	if s.st == nil {
		writeError(w, http.StatusServiceUnavailable, apiv1.CodeUnavailable, "this server keeps no accounts")
		return access.Principal{}, false
	}
	return principalFrom(r.Context()), true
}

// accounts are the caller's accounts: a service key has none (its
// maker's are theirs).
func (s *identitiesRouter) accounts(ctx context.Context, p access.Principal) ([]domain.Identity, error) {
	if p.Service {
		return nil, nil
	}
	return s.st.ListIdentities(ctx, p.OrgID, p.UserID)
}

func (s *identitiesRouter) list(w http.ResponseWriter, r *http.Request) {
	p, ok := s.person(w, r)
	if !ok {
		return
	}
	ids, err := s.accounts(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := apiv1.IdentityList{Items: make([]apiv1.Identity, 0, len(ids))}
	for _, id := range ids {
		out.Items = append(out.Items, apiv1.Identity{Kind: string(id.Kind), Account: id.ExternalID, How: string(id.How), CreatedAt: id.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *identitiesRouter) link(w http.ResponseWriter, r *http.Request) {
	var req apiv1.LinkIdentityRequest
	if !s.decode(w, r, &req) {
		return
	}
	p, ok := s.person(w, r)
	if !ok {
		return
	}
	if p.Service {
		writeError(w, http.StatusForbidden, apiv1.CodeForbidden, "a service key has no accounts of its own: link with a personal key")
		return
	}
	say, msg := linkSay(req)
	if msg != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, msg)
		return
	}
	code := access.NewLinkCode()
	now := s.now()
	c := domain.IdentityCode{Hash: domain.HashLinkCodeFor(code, req.Account), OrgID: p.OrgID, UserID: p.UserID,
		Kind: domain.IntegrationKind(req.Kind), ExpiresAt: now.Add(identityCodeTTL), CreatedAt: now}
	if err := s.st.CreateIdentityCode(r.Context(), c); err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, req.Kind)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, apiv1.IdentityLink{Code: code, ExpiresAt: c.ExpiresAt, Say: strings.ReplaceAll(say, "CODE", code)})
}

// githubLoginRE is a GitHub login: letters, digits and single hyphens.
var githubLoginRE = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9]|-[A-Za-z0-9]){0,38}$`)

// linkSay is what to say with a link code of req's kind (CODE standing
// for it), or why none can be made. A GitHub code is said in public, so it
// is made for one login: the same code said by another is no code.
func linkSay(req apiv1.LinkIdentityRequest) (say, refused string) {
	const within = " (within 15 minutes, once)"
	switch domain.IntegrationKind(req.Kind) {
	case domain.IntegrationGitHub:
		if !githubLoginRE.MatchString(req.Account) {
			return "", "account: the GitHub login that will say the code is required (e.g. octocat)"
		}
		return "comment on a pull request or issue of a repository engrams serves, signed in to GitHub as " + req.Account +
			": @engrams link CODE" + within, ""
	case domain.IntegrationSlack, domain.IntegrationLinear:
		if req.Account != "" {
			return "", "account: only a github code names the account that will say it"
		}
		if req.Kind == string(domain.IntegrationLinear) {
			return "comment on an issue in Linear: @engrams link CODE" + within, ""
		}
		return "mention the engrams app in Slack with: link CODE" + within, ""
	}
	return "", "kind: " + quote(req.Kind) + " cannot be linked (slack, github and linear can)"
}

func (s *identitiesRouter) unlink(w http.ResponseWriter, r *http.Request) {
	p, ok := s.person(w, r)
	if !ok {
		return
	}
	kind, account := domain.IntegrationKind(r.PathValue("kind")), r.PathValue("account")
	id, err := s.st.GetIdentity(r.Context(), p.OrgID, kind, account)
	if errors.Is(err, domain.ErrNotFound) || (err == nil && (p.Service || id.UserID != p.UserID)) {
		s.fail(w, r, notFound(fmt.Sprintf("%s account %s", kind, quote(account)))) // another's is not there for you
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.st.DeleteIdentity(r.Context(), p.OrgID, kind, account); err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, string(kind)+":"+account)
	w.WriteHeader(http.StatusNoContent)
}
