package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// Keys is what authentication reads and writes of the store.
type Keys interface {
	access.Keys
	TouchToken(ctx context.Context, id string, at time.Time) error
}

// authn admits requests that carry a valid API key and puts the
// principal it acts as in their context.
type authn struct {
	*base
	st      Keys
	owners  ownerReads
	grants  GrantReads // nil: only owners and admins drive tasks' sessions
	touched touches
}

// admit checks the credential (an API key, or a browser's sign-in
// cookie), then that the principal holds what rule needs.
func (a *authn) admit(rule access.Rule, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, cookie, msg := credential(r)
		if msg != "" {
			writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, msg)
			return
		}
		t, p, err := access.Resolve(r.Context(), a.st, access.HashSecret(secret), a.now())
		if err == nil && p.SignIn != cookie {
			err = access.ErrUnknownKey // a sign-in only as its cookie; a key never as one
		}
		switch {
		case errors.Is(err, access.ErrUnknownKey), errors.Is(err, access.ErrExpired), errors.Is(err, access.ErrNoMember):
			if cookie {
				clearSignIn(w)
			}
			writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, err.Error())
			return
		case err != nil:
			a.fail(w, r, err)
			return
		}
		if cookie {
			if msg := forged(r, secret); msg != "" {
				writeError(w, http.StatusForbidden, apiv1.CodeForbidden, msg)
				return
			}
		}
		a.touch(r.Context(), t.ID)
		if !p.Allows(rule.Need) {
			writeError(w, http.StatusForbidden, apiv1.CodeForbidden, refusal(p, rule.Need))
			return
		}
		if rule.Scope != "" && !a.scoped(w, r, rule.Scope, p) {
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// credential is the secret r presents: a bearer key, a WebSocket
// subprotocol key, or (cookie) the sign-in cookie; msg says what is
// missing.
func credential(r *http.Request) (secret string, cookie bool, msg string) {
	if h := r.Header.Get("Authorization"); h != "" {
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || secret == "" {
			return "", false, "the Authorization header must be: Bearer <key>"
		}
		return secret, false, ""
	}
	if secret, ok := wsBearer(r); ok && secret != "" {
		return secret, false, ""
	}
	if c, err := r.Cookie(apiv1.SessionCookie); err == nil && c.Value != "" {
		return c.Value, true, ""
	}
	return "", false, "missing API key: send Authorization: Bearer <key> (`engrams login`, or `engrams token create` for another)"
}

// forged says why a cookie-authenticated request may be another site's
// doing, or "". A write must carry the anti-forgery header (a page of
// another origin cannot read the cookie it comes from); a WebSocket
// upgrade, which a page of any origin may open with the browser's
// cookies, must come from this origin.
func forged(r *http.Request, secret string) string {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		if o := r.Header.Get("Origin"); o == "" || !sameOrigin(o, r.Host) {
			return "a terminal opened with the sign-in cookie must come from this site's pages"
		}
		return ""
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return ""
	}
	if !access.CSRFMatches(secret, r.Header.Get(apiv1.HeaderCSRF)) {
		return "a write signed in by cookie needs the " + apiv1.HeaderCSRF + " header (the value of the " + apiv1.CSRFCookie + " cookie)"
	}
	return ""
}

// sameOrigin says origin (scheme://host[:port]) names host.
func sameOrigin(origin, host string) bool {
	_, rest, ok := strings.Cut(origin, "://")
	return ok && strings.EqualFold(rest, host)
}

// clearSignIn drops a refused sign-in's cookies from the browser.
func clearSignIn(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: apiv1.SessionCookie, Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	http.SetCookie(w, &http.Cookie{Name: apiv1.CSRFCookie, Path: "/", MaxAge: -1, SameSite: http.SameSiteStrictMode})
}

// refusal says why p may not use a route that needs n.
func refusal(p access.Principal, n access.Need) string {
	has := "no role in an organisation"
	if p.OrgID != "" {
		has = "the " + string(p.Role) + " role"
	}
	switch n {
	case access.Fleet:
		return "this needs the fleet operator grant (hosts are the deployment's, not an organisation's)"
	case access.Admin:
		return "this needs the admin role in the organisation; this key has " + has
	}
	return "this needs a role in an organisation; this key has " + has
}

// principalKey carries the principal a request was admitted as.
type principalKey struct{}

// principalFrom is who r's context acts as (zero for public routes).
func principalFrom(ctx context.Context) access.Principal {
	p, _ := ctx.Value(principalKey{}).(access.Principal)
	return p
}

// wsBearer is the token a browser's WebSocket upgrade offers as the
// subprotocol apiv1.WSBearerPrefix+token (with apiv1.WSProtocol).
func wsBearer(r *http.Request) (string, bool) {
	for _, p := range wsProtocols(r) {
		if t, ok := strings.CutPrefix(p, apiv1.WSBearerPrefix); ok {
			return t, true
		}
	}
	return "", false
}

// offers says r is a WebSocket upgrade offering the subprotocol proto.
func offers(r *http.Request, proto string) bool { return slices.Contains(wsProtocols(r), proto) }

// wsProtocols are the subprotocols a WebSocket upgrade offers (none for
// another request).
func wsProtocols(r *http.Request) []string {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return nil
	}
	var out []string
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			out = append(out, strings.TrimSpace(p))
		}
	}
	return out
}

// touchEvery bounds how often a token's last use is written.
const touchEvery = time.Minute

// touches rate-limits last-use writes, per token.
type touches struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// touch records that token id was used, at most once per touchEvery.
func (a *authn) touch(ctx context.Context, id string) {
	now := a.now()
	a.touched.mu.Lock()
	if a.touched.last == nil {
		a.touched.last = map[string]time.Time{}
	}
	due := now.Sub(a.touched.last[id]) >= touchEvery
	if due {
		a.touched.last[id] = now
	}
	a.touched.mu.Unlock()
	if !due {
		return
	}
	if err := a.st.TouchToken(ctx, id, now); err != nil {
		a.log.Warn("record token use", "token_id", id, "err", err)
	}
}

// KeyStore is what the keys routes use of the store.
type KeyStore interface {
	CreateToken(ctx context.Context, t domain.Token) error
	GetToken(ctx context.Context, id string) (domain.Token, error)
	ListTokens(ctx context.Context, f domain.TokenFilter) ([]domain.Token, error)
}

// keysRouter serves API keys: a person makes, lists and revokes their
// own; an admin all of the organisation's; a fleet operator host tokens.
type keysRouter struct {
	*base
	st    KeyStore
	admin HostAdmin // revokes (a host token's link closes at once)
}

func (s *keysRouter) route(h func(string, http.HandlerFunc)) {
	h(apiv1.RouteCreateToken, s.createToken)
	h(apiv1.RouteListTokens, s.listTokens)
	h(apiv1.RouteRevokeToken, s.revokeToken)
}

// newKey is the key a request asks p to make, or what is wrong with it.
func (s *keysRouter) newKey(p access.Principal, req apiv1.CreateTokenRequest) (domain.Token, error) {
	if p.Service {
		return domain.Token{}, forbidden("a service key cannot make keys: use a person's key")
	}
	if msg := access.CheckName(req.Name); msg != "" {
		return domain.Token{}, invalid("key " + msg)
	}
	t := domain.Token{ID: s.newID(), Name: req.Name, Kind: domain.TokenUser, OrgID: p.OrgID, UserID: p.UserID, Role: p.Role, CreatedAt: s.now()}
	switch req.Kind {
	case "", apiv1.KeyPersonal:
	case apiv1.KeyService:
		if !p.Allows(access.Admin) {
			return domain.Token{}, forbidden("service keys are made by admins")
		}
		t.Kind = domain.TokenService
	default:
		return domain.Token{}, invalid("kind " + quote(req.Kind) + ": want personal or service")
	}
	if req.Role != "" {
		role := domain.Role(req.Role)
		if !role.Valid() {
			return domain.Token{}, invalid("role " + quote(req.Role) + ": want member, admin or owner")
		}
		if !p.Role.AtLeast(role) {
			return domain.Token{}, forbidden("a key's role may not exceed yours (" + string(p.Role) + ")")
		}
		t.Role = role
	}
	if req.ExpiresIn > 0 {
		t.ExpiresAt = t.CreatedAt.Add(time.Duration(req.ExpiresIn) * time.Second)
	}
	return t, nil
}

func (s *keysRouter) createToken(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateTokenRequest
	if !s.decode(w, r, &req) {
		return
	}
	t, err := s.newKey(principalFrom(r.Context()), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	secret, prefix := access.NewSecret()
	t.Prefix, t.Hash = prefix, coordinator.HashToken(secret)
	if err := s.st.CreateToken(r.Context(), t); err != nil {
		s.fail(w, r, err)
		return
	}
	noteTarget(r, t.ID)
	writeSecret(w, http.StatusCreated, apiv1.CreateTokenResponse{Token: tokenOut(t), Secret: secret})
}

// sees says p may see (and so revoke) t.
func sees(p access.Principal, t domain.Token) bool {
	switch t.Kind {
	case domain.TokenHost:
		return p.Fleet
	case domain.TokenService:
		return t.OrgID == p.OrgID && p.Allows(access.Admin)
	case domain.TokenUser, domain.TokenSession:
		if t.UserID == p.UserID && t.OrgID == p.OrgID && !p.Service {
			return true
		}
		return t.OrgID != "" && t.OrgID == p.OrgID && p.Allows(access.Admin)
	}
	return false
}

func (s *keysRouter) listTokens(w http.ResponseWriter, r *http.Request) {
	pg, ok := readPage(w, r)
	if !ok {
		return
	}
	p := principalFrom(r.Context())
	filters := []domain.TokenFilter{{OrgID: p.OrgID, UserID: p.UserID, Kind: domain.TokenUser}, {OrgID: p.OrgID, UserID: p.UserID, Kind: domain.TokenSession}}
	if p.Allows(access.Admin) {
		filters = []domain.TokenFilter{{OrgID: p.OrgID}}
	}
	if p.Fleet {
		filters = append(filters, domain.TokenFilter{Kind: domain.TokenHost})
	}
	all := []apiv1.Token{}
	for _, f := range filters {
		ts, err := s.st.ListTokens(r.Context(), f)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		for _, t := range ts {
			if t.RevokedAt.IsZero() && sees(p, t) {
				all = append(all, tokenOut(t))
			}
		}
	}
	var out apiv1.TokenList
	out.Items, out.NextCursor = pageOf(all, func(t apiv1.Token) string { return timeKey(t.CreatedAt) + t.ID }, pg)
	writeJSON(w, http.StatusOK, out)
}

func (s *keysRouter) revokeToken(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	t, err := s.st.GetToken(r.Context(), id)
	if err == nil && !sees(principalFrom(r.Context()), t) {
		err = notFound("key " + quote(id))
	}
	if err == nil {
		err = s.admin.RevokeToken(r.Context(), id)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func tokenOut(t domain.Token) apiv1.Token {
	kind := apiv1.KeyPersonal
	switch t.Kind {
	case domain.TokenService:
		kind = apiv1.KeyService
	case domain.TokenHost:
		kind = apiv1.KeyHost
	case domain.TokenSession:
		kind = apiv1.KeySignIn
	}
	return apiv1.Token{ID: t.ID, Name: t.Name, Kind: kind, HostID: string(t.HostID), UserID: string(t.UserID), Role: string(t.Role),
		Prefix: t.Prefix, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt}
}

// ownerReads find whose a route's session or task is (the store).
type ownerReads struct {
	session func(ctx context.Context, id domain.SessionID) (domain.Session, error)
	task    func(ctx context.Context, id domain.TaskID) (domain.Task, error)
}

// owned is whose a route's session or task is, and for a task the
// profile it runs with.
type owned struct {
	owner   domain.Owner
	profile domain.ProfileID // a task's; "" for a session (mayDrive looks)
}

// owner is whose the thing of kind scope named id is; ErrNotFound when
// there is none (or this server cannot look: the default is no).
func (o ownerReads) owner(ctx context.Context, scope access.Scope, id string) (owned, error) {
	switch {
	case scope == access.ScopeSession && o.session != nil:
		s, err := o.session(ctx, domain.SessionID(id))
		return owned{owner: s.Spec.Owner}, err
	case scope == access.ScopeTask && o.task != nil:
		t, err := o.task(ctx, domain.TaskID(id))
		return owned{owner: t.Owner, profile: t.ProfileID}, err
	}
	return owned{}, domain.ErrNotFound
}

// scoped answers 404, as for a thing that does not exist, unless p sees
// the session or task r's route names, and 403 when p sees it but r
// drives it and p may not (mayDrive); true when r may go on.
func (a *authn) scoped(w http.ResponseWriter, r *http.Request, scope access.Scope, p access.Principal) bool {
	id := r.PathValue("id")
	th, err := a.owners.owner(r.Context(), scope, id)
	o := th.owner
	switch {
	case err == nil && p.Viewer().Sees(o) && drives(r, p, o):
		ok, prof, err := a.mayDrive(r.Context(), scope, id, th.profile, p)
		if err != nil {
			a.fail(w, r, err)
		} else if !ok {
			driveRefused(w, scope, id, prof)
		}
		return err == nil && ok
	case err == nil && p.Viewer().Sees(o):
		return true
	case err == nil, errors.Is(err, domain.ErrNotFound):
		writeError(w, http.StatusNotFound, apiv1.CodeNotFound, "get "+string(scope)+" "+id+": not found")
	default:
		a.fail(w, r, err)
	}
	return false
}

// GrantReads find the profile a task runs with, for the routes that
// continue or drive it (the store satisfies it).
type GrantReads interface {
	TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error)
	GetProfile(ctx context.Context, id domain.ProfileID) (domain.Profile, error)
}

// drives says the route r is on continues or drives a task or session
// (anything but reading it): a follow-up, exec, the terminal, files
// written, suspend, resume. Ending one's own is not driving it.
func drives(r *http.Request, p access.Principal, o domain.Owner) bool {
	switch r.Pattern {
	case apiv1.RouteExecWS:
		return true
	case apiv1.RouteStopTask, apiv1.RouteDeleteSession:
		return p.Service || o.UserID != p.UserID
	}
	return r.Method != http.MethodGet && r.Method != http.MethodHead
}

// mayDrive says p may drive the task (profile names its profile) or the
// session of a task r's route names: owners and admins always; a member while its profile is
// granted to them (to a group they are in, or to everyone), so a shared
// task, or one of theirs whose grant was taken back, is for reading only.
// A session of no task is its owner's to drive. The default is no: a
// server that cannot look refuses.
func (a *authn) mayDrive(ctx context.Context, scope access.Scope, id string, profile domain.ProfileID, p access.Principal) (bool, domain.Profile, error) {
	if p.Role.AtLeast(domain.RoleAdmin) {
		return true, domain.Profile{}, nil
	}
	if a.grants == nil {
		return false, domain.Profile{}, nil
	}
	if scope == access.ScopeSession { // the task read admission did not make
		t, err := a.grants.TaskBySession(ctx, domain.SessionID(id))
		if errors.Is(err, domain.ErrNotFound) {
			return true, domain.Profile{}, nil
		}
		if err != nil {
			return false, domain.Profile{}, err
		}
		profile = t.ProfileID
	}
	prof, err := a.grants.GetProfile(ctx, profile)
	if errors.Is(err, domain.ErrNotFound) {
		return false, domain.Profile{}, nil
	}
	if err != nil {
		return false, domain.Profile{}, err
	}
	return p.Grantee().MayUse(prof), prof, nil
}

// driveRefused answers 403: p sees the thing but may not drive it.
func driveRefused(w http.ResponseWriter, scope access.Scope, id string, prof domain.Profile) {
	msg := "you may read " + string(scope) + " " + id + " but not drive it"
	if prof.Name != "" {
		msg += ": its profile " + quote(prof.Name) + " is not granted to you (an admin grants it: `engrams profile grant " + prof.Name + " user:ID`)"
	}
	writeError(w, http.StatusForbidden, apiv1.CodeForbidden, msg)
}
