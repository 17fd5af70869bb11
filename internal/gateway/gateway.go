package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
)

// The model gateway: a guest's harness holds a session-scoped placeholder
// instead of a model provider key; its requests reach the coordinator over
// the host link (hostlink.PathGateway), which swaps the placeholder for the
// real key and forwards them to the provider. The real key never enters a
// guest.

// Gateway key: one random key per deployment, sealed in the secrets table,
// so every replica and every restart compute the same placeholders.
const (
	gatewayKeyBytes   = 32
	placeholderPrefix = domain.PlaceholderPrefix
)

var gatewayKeyName = secrets.Internal{Kind: "gateway_key", Name: "engrams-gateway-key", Purpose: "model gateway placeholders"}

// gatewayServes reports whether the gateway forwards credentials of kind:
// the model keys, which have a default base URL (secrets.go). Git logins
// and generic secrets never leave the coordinator this way.
func gatewayServes(kind string) bool {
	return secrets.DefaultBaseURL(kind) != ""
}

// gatewayState is the replica's gateway key (cached once read).
type gatewayState struct {
	mu  sync.Mutex
	key []byte
}

// Placeholder is the token the harness of session sessionID is given for
// credential kind: "engrams-ph-" + base64url(HMAC-SHA256(gateway key,
// sessionID + "\x00" + kind)). It is useless outside the gateway, and the
// gateway accepts it only for that session, from the host running it.
func (c *Gateway) Placeholder(ctx context.Context, sessionID domain.SessionID, kind string) (string, error) {
	if sessionID == "" || kind == "" {
		return "", fmt.Errorf("%w: a gateway placeholder needs a session id and a credential kind", domain.ErrInvalid)
	}
	key, err := c.gatewayKey(ctx)
	if err != nil {
		return "", err
	}
	return placeholder(key, sessionID, kind), nil
}

func placeholder(key []byte, sessionID domain.SessionID, kind string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(sessionID))
	m.Write([]byte{0})
	m.Write([]byte(kind))
	return placeholderPrefix + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// gatewayKey returns the deployment's gateway key, creating it on first
// use. A replica that loses the race to create it reads the winner's.
func (c *Gateway) gatewayKey(ctx context.Context) ([]byte, error) {
	c.gateway.mu.Lock()
	defer c.gateway.mu.Unlock()
	if c.gateway.key != nil {
		return c.gateway.key, nil
	}
	if c.secrets == nil {
		return nil, fmt.Errorf("gateway key: %w: this server keeps no secrets (no key configured), so it cannot run the model gateway", domain.ErrInvalid)
	}
	key, created, err := gatewayKeyName.Load(ctx, secrets.InternalDeps{Store: c.st, Sealer: c.secrets, Now: c.now, NewID: c.newID}, func() ([]byte, error) {
		key := make([]byte, gatewayKeyBytes)
		_, err := rand.Read(key)
		return key, err
	})
	if err != nil {
		return nil, fmt.Errorf("gateway key: %w", err)
	}
	if len(key) != gatewayKeyBytes {
		return nil, fmt.Errorf("gateway key: %d bytes, want %d", len(key), gatewayKeyBytes)
	}
	if created {
		c.log.Info("gateway key created")
	}
	c.gateway.key = key
	return key, nil
}

// gatewayRefusal is why a gateway request is refused, with its status: msg
// is answered to the guest (no ids, names or store errors), cause only
// logged.
type gatewayRefusal struct {
	status int
	msg    string
	cause  error
}

func (r *gatewayRefusal) Error() string { return r.msg }
func (r *gatewayRefusal) Unwrap() error { return r.cause }

func refuse(status int, format string, args ...any) error {
	return &gatewayRefusal{status: status, msg: fmt.Sprintf(format, args...)}
}

// gatewayGrant checks that session sid may use kind from hostID and returns
// the secret its spec grants for kind.
func (c *Gateway) gatewayGrant(ctx context.Context, hostID domain.HostID, sid domain.SessionID, kind string) (domain.CredentialGrant, error) {
	if !gatewayServes(kind) {
		return domain.CredentialGrant{}, refuse(http.StatusNotFound, "the model gateway serves no credential kind %q", kind)
	}
	if err := c.gatewayHostAllowed(ctx, hostID); err != nil {
		return domain.CredentialGrant{}, err
	}
	s, err := c.st.GetSession(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return domain.CredentialGrant{}, refuse(http.StatusForbidden, "this session does not exist")
	}
	if err != nil {
		return domain.CredentialGrant{}, fmt.Errorf("gateway: read session %s: %w", sid, err)
	}
	if s.HostID != hostID {
		return domain.CredentialGrant{}, refuse(http.StatusForbidden, "this session does not run on this host")
	}
	if !s.State.MayUseCredentials() {
		return domain.CredentialGrant{}, refuse(http.StatusForbidden, "this session is %s", s.State)
	}
	if err := c.gatewayTaskLive(ctx, sid); err != nil {
		return domain.CredentialGrant{}, err
	}
	if g, ok := s.Spec.Grant(kind); ok {
		return g, nil
	}
	return domain.CredentialGrant{}, refuse(http.StatusForbidden, "this session is granted no %s credential", kind)
}

// gatewayHostAllowed refuses a host an admin disabled or deleted, and a
// link whose host token was revoked: their links are being closed, and
// until then they get nothing through the gateway.
func (c *Gateway) gatewayHostAllowed(ctx context.Context, hostID domain.HostID) error {
	h, err := c.st.GetHost(ctx, hostID)
	if errors.Is(err, store.ErrNotFound) {
		return refuse(http.StatusForbidden, "this host is not registered")
	}
	if err != nil {
		return fmt.Errorf("gateway: read host %s: %w", hostID, err)
	}
	if !h.Enabled() {
		return refuse(http.StatusForbidden, "this host may no longer use the model gateway")
	}
	l, _ := hostlink.LinkFrom(ctx)
	if l.TokenID == "" {
		return nil
	}
	t, err := c.st.GetToken(ctx, l.TokenID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !t.RevokedAt.IsZero()) {
		return refuse(http.StatusForbidden, "this host may no longer use the model gateway")
	}
	if err != nil {
		return fmt.Errorf("gateway: read token %s: %w", l.TokenID, err)
	}
	return nil
}

// gatewayTaskLive refuses the session of a stopped or failed task: its
// machine may run again (task diff and files resume it), its agent may not
// use the model.
func (c *Gateway) gatewayTaskLive(ctx context.Context, sid domain.SessionID) error {
	t, err := c.st.TaskBySession(ctx, sid)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gateway: find the task of session %s: %w", sid, err)
	}
	if t.State == domain.TaskStopped || t.State == domain.TaskFailed {
		return &gatewayRefusal{status: http.StatusForbidden, msg: "the task was stopped",
			cause: fmt.Errorf("task %s is %s", t.ID, t.State)}
	}
	return nil
}

// gatewaySecret opens the granted secret and returns its key and the
// upstream base URL.
func (c *Gateway) gatewaySecret(ctx context.Context, g domain.CredentialGrant) (key string, base *url.URL, err error) {
	s, plain, err := c.vault.Open(ctx, g.SecretID)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil, &gatewayRefusal{status: http.StatusUnauthorized, cause: err,
			msg: fmt.Sprintf("the %s credential of this session was deleted", g.Kind)}
	}
	if err != nil {
		return "", nil, fmt.Errorf("gateway: %w", err)
	}
	if s.Kind != g.Kind {
		return "", nil, fmt.Errorf("gateway: secret %s is a %s, granted as a %s", s.ID, s.Kind, g.Kind)
	}
	base, err = gatewayBase(s)
	if err != nil {
		return "", nil, err
	}
	return string(plain), base, nil
}

// gatewayBase is the secret's meta base_url, or its kind's default.
func gatewayBase(s domain.Secret) (*url.URL, error) {
	var meta struct {
		BaseURL string `json:"base_url"`
	}
	if len(s.Meta) > 0 {
		if err := json.Unmarshal(s.Meta, &meta); err != nil {
			return nil, fmt.Errorf("gateway: decode meta of secret %s: %w", s.ID, err)
		}
	}
	raw := meta.BaseURL
	if raw == "" {
		raw = secrets.DefaultBaseURL(s.Kind)
	}
	if err := secrets.CheckBaseURL(raw); err != nil {
		return nil, fmt.Errorf("gateway: secret %s: base_url %w", s.ID, err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("gateway: secret %s: base_url %w", s.ID, err)
	}
	return u, nil
}
