package signin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
)

// Bounds of a CLI sign-in.
const (
	cliBodyMax  = 16 << 10         // a request: an ID token and two names
	cliFreshFor = 10 * time.Minute // an ID token older than this is refused
	usedMax     = 10000            // ID tokens remembered as used
)

// usedTokens remembers the ID tokens already traded for a key until they
// expire, so one cannot be traded twice.
type usedTokens struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// take records hash as used until exp; false if it already was.
func (u *usedTokens) take(hash string, exp, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.until == nil {
		u.until = map[string]time.Time{}
	}
	if t, ok := u.until[hash]; ok && now.Before(t) {
		return false
	}
	if len(u.until) >= usedMax {
		for h, t := range u.until {
			if !now.Before(t) {
				delete(u.until, h)
			}
		}
	}
	if len(u.until) >= usedMax {
		return false // full of live tokens: refuse rather than forget one
	}
	u.until[hash] = exp
	return true
}

// cliSignIn trades a fresh ID token for the CLI's client (from the
// provider's device flow) for a personal key in the person's
// organisation, expiring after CLIKeyTTL.
func (s *Service) cliSignIn(w http.ResponseWriter, r *http.Request) {
	var req apiv1.CLISignInRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, cliBodyMax+1))
	if err != nil || len(body) > cliBodyMax {
		writeError(w, http.StatusRequestEntityTooLarge, apiv1.CodeTooLarge, fmt.Sprintf("a CLI sign-in is at most %d bytes", cliBodyMax))
		return
	}
	if err := json.Unmarshal(body, &req); err != nil || req.IDToken == "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, `a CLI sign-in is {"id_token": "…", "name": "…", "org": "…"}`)
		return
	}
	now := s.deps.Now()
	name := req.Name
	if name == "" {
		name = "cli-" + now.UTC().Format("20060102-150405")
	}
	if msg := access.CheckName(name); msg != "" {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "key "+msg)
		return
	}
	p, err := s.discover(r.Context())
	if err != nil {
		status := http.StatusBadGateway
		if errors.Is(err, errNoProvider) {
			status = http.StatusNotFound
		}
		writeError(w, status, apiv1.CodeUnavailable, err.Error())
		return
	}
	ctx := oidc.ClientContext(r.Context(), s.cfg.HTTPClient)
	id, err := p.Verifier(&oidc.Config{ClientID: s.cfg.CLIClientID, Now: s.deps.Now}).Verify(ctx, req.IDToken)
	if err == nil && now.Sub(id.IssuedAt) > cliFreshFor {
		err = errors.New("the ID token is too old: sign in again")
	}
	if err == nil && !s.used.take(access.HashSecret(req.IDToken), id.Expiry, now) {
		err = errors.New("this ID token was already used")
	}
	if err != nil {
		writeError(w, http.StatusUnauthorized, apiv1.CodeUnauthorized, "sign-in refused: "+err.Error())
		return
	}
	m, err := s.member(r.Context(), id, domain.OrgID(req.Org))
	if err != nil {
		status, code := http.StatusInternalServerError, apiv1.CodeInternal
		if errors.Is(err, errNoAccount) {
			status, code = http.StatusForbidden, apiv1.CodeForbidden
		}
		writeError(w, status, code, err.Error())
		return
	}
	secret, prefix := access.NewSecret()
	t := domain.Token{ID: s.deps.NewID(), Name: name, Kind: domain.TokenUser, OrgID: m.OrgID, UserID: m.User.ID, Role: m.Role,
		Prefix: prefix, Hash: access.HashSecret(secret), CreatedAt: now, ExpiresAt: now.Add(s.cfg.CLIKeyTTL)}
	if err := s.deps.Store.CreateToken(r.Context(), t); err != nil {
		s.deps.Logger.Error("CLI sign-in: make a key", "err", err)
		writeError(w, http.StatusInternalServerError, apiv1.CodeInternal, "could not make a key")
		return
	}
	s.audit(r.Context(), r, m.OrgID, m.User, t.ID, "signin.cli")
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, apiv1.CreateTokenResponse{Secret: secret, Token: apiv1.Token{ID: t.ID, Name: t.Name,
		Kind: apiv1.KeyPersonal, UserID: string(t.UserID), Role: string(t.Role), Prefix: t.Prefix, CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiv1.Error{Error: msg, Code: code})
}
