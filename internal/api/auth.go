package api

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// TokenPrefix starts every secret engrams mints, so leaked ones are easy to scan for.
const TokenPrefix = "egr_"

// NewSecret returns a fresh token secret (32 random bytes) and its visible prefix.
func NewSecret() (secret, prefix string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	secret = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, secret[:len(TokenPrefix)+6]
}

// auth admits requests that carry a valid user token.
func (s *hostsRouter) auth(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		secret, ok := strings.CutPrefix(h, "Bearer ")
		if h == "" {
			secret, ok = wsBearer(r)
		}
		if !ok || secret == "" {
			writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, "missing bearer token: send Authorization: Bearer <token> (create one with `engrams token create`)")
			return
		}
		t, err := s.st.TokenByHash(r.Context(), coordinator.HashToken(secret))
		if errors.Is(err, domain.ErrNotFound) || (err == nil && t.Kind != domain.TokenUser) {
			writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, "token is not valid or was revoked")
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		s.touch(r.Context(), t.ID)
		ctx := context.WithValue(r.Context(), tokenKey{}, t.ID)
		next(w, r.WithContext(context.WithValue(ctx, tokenNameKey{}, t.Name)))
	})
}

// tokenKey carries the ID of the token a request was admitted with.
type tokenKey struct{}

// tokenIDFrom is the ID of the token r's context was admitted with.
func tokenIDFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(tokenKey{}).(string)
	return id, ok
}

// tokenNameKey carries the name of the token a request was admitted with.
type tokenNameKey struct{}

// tokenNameFrom is the name of the token r's context was admitted with.
func tokenNameFrom(ctx context.Context) string {
	name, _ := ctx.Value(tokenNameKey{}).(string)
	return name
}

// wsBearer is the token a browser's WebSocket upgrade offers as the
// subprotocol apiv1.WSBearerPrefix+token (with apiv1.WSProtocol).
func wsBearer(r *http.Request) (string, bool) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		return "", false
	}
	for _, v := range r.Header.Values("Sec-WebSocket-Protocol") {
		for _, p := range strings.Split(v, ",") {
			if t, ok := strings.CutPrefix(strings.TrimSpace(p), apiv1.WSBearerPrefix); ok {
				return t, true
			}
		}
	}
	return "", false
}

// touchEvery bounds how often a token's last use is written.
const touchEvery = time.Minute

// touches rate-limits last-use writes, per token.
type touches struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// touch records that token id was used, at most once per touchEvery.
func (s *hostsRouter) touch(ctx context.Context, id string) {
	now := s.now()
	s.touched.mu.Lock()
	if s.touched.last == nil {
		s.touched.last = map[string]time.Time{}
	}
	due := now.Sub(s.touched.last[id]) >= touchEvery
	if due {
		s.touched.last[id] = now
	}
	s.touched.mu.Unlock()
	if !due {
		return
	}
	if err := s.st.TouchToken(ctx, id, now); err != nil {
		s.log.Warn("record token use", "token_id", id, "err", err)
	}
}

func (s *hostsRouter) createToken(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CreateTokenRequest
	if !s.decode(w, r, &req) {
		return
	}
	if msg := checkName(req.Name); msg != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "token "+msg)
		return
	}
	secret, prefix := NewSecret()
	t := domain.Token{ID: s.newID(), Name: req.Name, Kind: domain.TokenUser, Prefix: prefix, Hash: coordinator.HashToken(secret), CreatedAt: s.now()}
	if err := s.st.CreateToken(r.Context(), t); err != nil {
		s.fail(w, r, err)
		return
	}
	writeSecret(w, http.StatusCreated, apiv1.CreateTokenResponse{Token: tokenOut(t), Secret: secret})
}

func (s *hostsRouter) listTokens(w http.ResponseWriter, r *http.Request) {
	p, ok := readPage(w, r)
	if !ok {
		return
	}
	ts, err := s.st.ListTokens(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	all := []apiv1.Token{}
	for _, t := range ts {
		if !t.RevokedAt.IsZero() {
			continue
		}
		all = append(all, tokenOut(t))
	}
	var out apiv1.TokenList
	out.Items, out.NextCursor = pageOf(all, func(t apiv1.Token) string { return timeKey(t.CreatedAt) + t.ID }, p)
	writeJSON(w, http.StatusOK, out)
}

func (s *hostsRouter) revokeToken(w http.ResponseWriter, r *http.Request) {
	if err := s.admin.RevokeToken(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func tokenOut(t domain.Token) apiv1.Token {
	return apiv1.Token{ID: t.ID, Name: t.Name, Kind: string(t.Kind), HostID: string(t.HostID), Prefix: t.Prefix, CreatedAt: t.CreatedAt, LastUsedAt: t.LastUsedAt}
}

// checkName returns what is wrong with a host or token name, or "".
func checkName(n string) string {
	if n == "" || len(n) > 63 {
		return "name must be 1 to 63 characters"
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "name may contain only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}
