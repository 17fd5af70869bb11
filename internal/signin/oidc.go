package signin

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/engrams/engrams/internal/domain"
)

// flowCookie holds a started sign-in's state, nonce and PKCE verifier
// between the redirect to the provider and its redirect back. It is
// HttpOnly, scoped to the callback's path and short-lived; the state in
// the callback's query must match it, so a callback the browser did not
// start (login CSRF) is refused.
const flowCookie = "engrams_oidc"

type flow struct {
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Next     string    `json:"next"`
	Expires  time.Time `json:"exp"`
}

// Why a callback is refused.
var (
	errBadState  = errors.New("this sign-in was not started in this browser, or it took too long: start again")
	errBadNonce  = errors.New("the identity provider's answer does not belong to this sign-in (nonce mismatch)")
	errNoAccount = errors.New("no engrams account")
)

func random() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return base64.RawURLEncoding.EncodeToString(b)
}

// safeNext is a local path to land on after sign-in ("/tasks" when next
// is not one: never another site).
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.ContainsAny(next, "\r\n") {
		return "/tasks"
	}
	return next
}

// start redirects the browser to the provider with a fresh state, nonce
// and PKCE challenge, kept in the flow cookie.
func (s *Service) start(w http.ResponseWriter, r *http.Request) {
	p, err := s.discover(r.Context())
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errNoProvider) {
			status = http.StatusNotFound
		}
		s.deps.Logger.Warn("sign-in: start", "err", err)
		refuse(w, status, err.Error())
		return
	}
	f := flow{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), Next: safeNext(r.URL.Query().Get("next")),
		Expires: s.deps.Now().Add(s.cfg.FlowTTL)}
	b, _ := json.Marshal(f)
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: base64.RawURLEncoding.EncodeToString(b), Path: "/v1/auth/oidc/",
		MaxAge: int(s.cfg.FlowTTL / time.Second), HttpOnly: true, Secure: strings.HasPrefix(s.cfg.BaseURL, "https://"), SameSite: http.SameSiteLaxMode})
	u := s.oauth(p).AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier))
	http.Redirect(w, r, u, http.StatusFound)
}

// readFlow is the browser's started sign-in, if the query's state is its.
func (s *Service) readFlow(r *http.Request) (flow, error) {
	c, err := r.Cookie(flowCookie)
	if err != nil || len(c.Value) > 4<<10 {
		return flow{}, errBadState
	}
	b, err := base64.RawURLEncoding.DecodeString(c.Value)
	var f flow
	if err != nil || json.Unmarshal(b, &f) != nil || f.State == "" || f.Nonce == "" || f.Verifier == "" {
		return flow{}, errBadState
	}
	if subtle.ConstantTimeCompare([]byte(f.State), []byte(r.URL.Query().Get("state"))) != 1 || !s.deps.Now().Before(f.Expires) {
		return flow{}, errBadState
	}
	return f, nil
}

// callback finishes a sign-in: the state matches this browser's flow, the
// code is exchanged with the PKCE verifier, the ID token is verified
// (issuer, audience, expiry, signature) and carries this flow's nonce,
// and its verified email is a member's.
func (s *Service) callback(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: flowCookie, Value: "", Path: "/v1/auth/oidc/", MaxAge: -1, HttpOnly: true})
	f, err := s.readFlow(r)
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	if e := r.URL.Query().Get("error"); e != "" {
		refuse(w, http.StatusUnauthorized, "the identity provider refused the sign-in: "+clip(e+" "+r.URL.Query().Get("error_description"), 200))
		return
	}
	m, err := s.finish(r.Context(), r.URL.Query().Get("code"), f)
	if err != nil {
		status := http.StatusUnauthorized
		if errors.Is(err, errNoAccount) {
			status = http.StatusForbidden
		}
		s.deps.Logger.Info("sign-in refused", "err", err)
		refuse(w, status, err.Error())
		return
	}
	if _, err := s.Begin(r.Context(), w, r, m, "oidc"); err != nil {
		s.deps.Logger.Error("sign-in", "err", err)
		refuse(w, http.StatusInternalServerError, "could not begin the sign-in")
		return
	}
	http.Redirect(w, r, f.Next, http.StatusFound)
}

// finish exchanges code and returns the membership the person signs in to.
func (s *Service) finish(ctx context.Context, code string, f flow) (domain.Member, error) {
	p, err := s.discover(ctx)
	if err != nil {
		return domain.Member{}, err
	}
	ctx = oidc.ClientContext(ctx, s.cfg.HTTPClient)
	tok, err := s.oauth(p).Exchange(ctx, code, oauth2.VerifierOption(f.Verifier))
	if err != nil {
		return domain.Member{}, fmt.Errorf("the identity provider refused the code (unknown, used or expired): %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return domain.Member{}, errors.New("the identity provider answered without an ID token")
	}
	id, err := p.Verifier(&oidc.Config{ClientID: s.cfg.ClientID, Now: s.deps.Now}).Verify(ctx, raw)
	if err != nil {
		return domain.Member{}, fmt.Errorf("verify the ID token: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(id.Nonce), []byte(f.Nonce)) != 1 {
		return domain.Member{}, errBadNonce
	}
	return s.member(ctx, id, "")
}

// claims are what sign-in reads of an ID token.
type claims struct {
	Email    string `json:"email"`
	Verified bool   `json:"email_verified"`
	// Groups, when the provider sends them, replace the member's groups
	// at each sign-in (the provider is then where groups are kept): a
	// list of names, or one name; what is not a name is dropped, never a
	// failed sign-in.
	Groups json.RawMessage `json:"groups"`
}

// member is the membership id's verified email signs in to: org, or the
// person's oldest membership when org is "".
func (s *Service) member(ctx context.Context, id *oidc.IDToken, org domain.OrgID) (domain.Member, error) {
	var c claims
	if err := id.Claims(&c); err != nil {
		return domain.Member{}, fmt.Errorf("read the ID token's claims: %w", err)
	}
	if c.Email == "" || !c.Verified {
		return domain.Member{}, fmt.Errorf("%w: the identity provider gave no verified email for this account", errNoAccount)
	}
	u, err := s.deps.Store.UserByEmail(ctx, c.Email)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Member{}, fmt.Errorf("%w for %s: ask an admin to add you (`engrams member add %s`)", errNoAccount, c.Email, c.Email)
	}
	if err != nil {
		return domain.Member{}, fmt.Errorf("look up %s: %w", c.Email, err)
	}
	ms, err := s.deps.Store.Memberships(ctx, u.ID)
	if err != nil {
		return domain.Member{}, fmt.Errorf("look up %s's organisations: %w", c.Email, err)
	}
	for _, m := range ms {
		if org == "" || m.OrgID == org {
			return s.syncGroups(ctx, m, groupNames(c.Groups))
		}
	}
	if org != "" {
		return domain.Member{}, fmt.Errorf("%w: %s is not a member of organisation %s", errNoAccount, c.Email, org)
	}
	return domain.Member{}, fmt.Errorf("%w: %s is in no organisation: ask an admin to add you", errNoAccount, c.Email)
}

// groupNames reads a groups claim: nil when absent (or null), else its
// string items (a lone string is one); anything else is skipped.
func groupNames(raw json.RawMessage) *[]string {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return &[]string{one}
	}
	var items []json.RawMessage
	out := []string{}
	if json.Unmarshal(raw, &items) != nil {
		return &out
	}
	for _, it := range items {
		var name string // null unmarshals to nothing: skipped below
		if json.Unmarshal(it, &name) == nil && string(it) != "null" {
			out = append(out, name)
		}
	}
	return &out
}

// syncGroups makes m's groups the provider's, when it sent any: the
// well-formed names, at most domain.MaxGroups of them (the rest are
// dropped and logged, never a failed sign-in).
func (s *Service) syncGroups(ctx context.Context, m domain.Member, sent *[]string) (domain.Member, error) {
	if sent == nil {
		return m, nil
	}
	groups := make([]string, 0, len(*sent))
	for _, g := range *sent {
		if len(groups) < domain.MaxGroups && domain.CheckGroups([]string{g}) == nil && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	if dropped := len(*sent) - len(groups); dropped > 0 {
		s.deps.Logger.Warn("sign-in: identity provider groups dropped", "user_id", m.User.ID, "sent", len(*sent), "dropped", dropped)
	}
	if slices.Equal(groups, m.Groups) {
		return m, nil
	}
	if err := s.deps.Store.SetMemberGroups(ctx, m.OrgID, m.User.ID, groups); err != nil {
		return domain.Member{}, fmt.Errorf("keep %s's groups: %w", m.User.ID, err)
	}
	m.Groups = groups
	// The provider changed what profiles they may use: on the record.
	e := domain.AuditEvent{ID: s.deps.NewID(), OrgID: m.OrgID, ActorKind: "system", ActorName: "identity provider",
		Action: "member.groups_from_provider", TargetKind: "member", TargetID: string(m.User.ID), Status: http.StatusOK, At: s.deps.Now()}
	if err := s.deps.Store.AppendAudit(context.WithoutCancel(ctx), e); err != nil {
		s.deps.Logger.Error("record an audit event", "action", e.Action, "err", err)
	}
	return m, nil
}

// refusedPage is what a browser whose sign-in failed sees; html/template
// escapes the message (it may quote the provider's words or an email).
var refusedPage = template.Must(template.New("refused").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign-in failed · engrams</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem}
@media (prefers-color-scheme:dark){body{background:#111;color:#eee}a{color:#8ab4ff}}</style></head>
<body><main><h1>Sign-in failed</h1><p role="alert">{{.}}</p><p><a href="/login">Back to sign-in</a></p></main></body></html>
`))

// refuse answers a browser's sign-in that failed, with the way back.
func refuse(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	_ = refusedPage.Execute(w, msg)
}

func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > n {
		return s[:n] + "…"
	}
	return strings.TrimSpace(s)
}
