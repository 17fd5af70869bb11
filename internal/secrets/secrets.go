package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/store"
)

// Secret bounds and reserved names.
const (
	maxSecretValueBytes = 16 << 10
	maxSecretMetaBytes  = 2048
	// internalSecretPrefix starts the names of secrets engrams keeps for
	// itself (the model gateway's key); users cannot take them.
	internalSecretPrefix = "engrams-"
)

// secretKinds are the kinds users store; other kinds are engrams's own.
func secretKinds() []string {
	return []string{apiv1.SecretAnthropicAPIKey, apiv1.SecretOpenAIAPIKey, apiv1.SecretGitHTTPS, apiv1.SecretGitHubApp, apiv1.SecretGeneric}
}

// UserKind reports whether users store secrets of kind (other kinds are
// engrams's own, such as the gateway's key).
func UserKind(kind string) bool { return slices.Contains(secretKinds(), kind) }

// DefaultBaseURL is where a model key is used unless meta says otherwise:
// the model gateway forwards to it (Anthropic's base without /v1, OpenAI's
// with it). Other kinds have none ("").
func DefaultBaseURL(kind string) string {
	switch kind {
	case apiv1.SecretAnthropicAPIKey:
		return "https://api.anthropic.com"
	case apiv1.SecretOpenAIAPIKey:
		return "https://api.openai.com/v1"
	case apiv1.SecretGitHubApp:
		return ghapp.DefaultBaseURL
	}
	return ""
}

// GitKind reports whether a secret of kind serves git clones (a profile
// repo's credential).
func GitKind(kind string) bool { return kind == apiv1.SecretGitHTTPS || kind == apiv1.SecretGitHubApp }

// GitHubAppHost is the git host of a GitHub App's REST API: github.com for
// api.github.com, else the API's own host (GitHub Enterprise Server serves
// both on one).
func GitHubAppHost(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ""
	}
	if h := strings.ToLower(u.Host); h != "api.github.com" {
		return h
	}
	return "github.com"
}

var secretNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// SecretRequest stores a secret; Value is sealed and never shown.
type SecretRequest struct {
	Org   domain.OrgID // whose it is; required
	Name  string
	Kind  string
	Value []byte
	Meta  apiv1.SecretMeta
}

// SecretView is a secret as shown: never its value.
type SecretView struct {
	Secret domain.Secret // Sealed is cleared
	Meta   apiv1.SecretMeta
	UsedBy []string // live profiles naming it
}

// AssociatedData binds a sealed secret to its row: seal and open every
// secret row's value with it.
func AssociatedData(id domain.SecretID) []byte {
	return domain.SealedSecret.AssociatedData(string(id))
}

// Create validates, seals and stores a secret. Its value is never
// logged, returned or quoted in an error.
func (c *Vault) Create(ctx context.Context, req SecretRequest) (SecretView, error) {
	if probs := checkSecret(&req); len(probs) > 0 {
		return SecretView{}, fmt.Errorf("%w: secret %s: %s", domain.ErrInvalid, req.Name, strings.Join(probs, "; "))
	}
	if req.Org == "" {
		return SecretView{}, fmt.Errorf("%w: secret %s: an organisation is required", domain.ErrInvalid, req.Name)
	}
	s, err := c.putSealedSecret(ctx, req.Org, req.Kind, req.Name, req.Value, req.Meta)
	if errors.Is(err, store.ErrConflict) {
		return SecretView{}, fmt.Errorf("%w: a secret named %s exists; delete it first to replace it (profiles name secrets, so they use the new one)",
			store.ErrConflict, req.Name)
	}
	if err != nil {
		return SecretView{}, err
	}
	c.log.Info("secret created", "secret_id", s.ID, "name", s.Name, "kind", s.Kind)
	return SecretView{Secret: s, Meta: req.Meta}, nil
}

// putSealedSecret seals value with the row's id as associated data and
// stores the row; the returned row has no sealed bytes.
func (c *Vault) putSealedSecret(ctx context.Context, org domain.OrgID, kind, name string, value []byte, meta apiv1.SecretMeta) (domain.Secret, error) {
	if c.secrets == nil {
		return domain.Secret{}, fmt.Errorf("%w: this server keeps no secrets (no --secrets-key-file), so it cannot store secret %s", domain.ErrInvalid, name)
	}
	rawMeta, err := json.Marshal(meta)
	if err != nil {
		return domain.Secret{}, fmt.Errorf("store secret %s: %w", name, err)
	}
	s := domain.Secret{ID: domain.SecretID(c.newID()), Org: org, Kind: kind, Name: name, Meta: rawMeta, CreatedAt: c.now()}
	if s.Sealed, err = c.secrets.Seal(value, AssociatedData(s.ID)); err != nil {
		return domain.Secret{}, fmt.Errorf("seal secret %s: %w", name, err)
	}
	if err := c.st.PutSecret(ctx, s); err != nil {
		return domain.Secret{}, fmt.Errorf("store secret %s: %w", name, err)
	}
	s.Sealed = nil
	return s, nil
}

// checkSecret lists what is wrong with req (never quoting its value) and
// fills in the default base URL of model keys.
func checkSecret(req *SecretRequest) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	switch {
	case !secretNameRE.MatchString(req.Name):
		bad("name %q: want 1-63 of A-Z a-z 0-9 . _ - starting with a letter or digit", req.Name)
	case strings.HasPrefix(strings.ToLower(req.Name), internalSecretPrefix):
		bad("name %q: names starting with %q are reserved for engrams", req.Name, internalSecretPrefix)
	}
	if !UserKind(req.Kind) {
		bad("kind %q: want one of %s", req.Kind, strings.Join(secretKinds(), ", "))
	}
	probs = append(probs, checkValue(req.Kind, req.Value)...)
	m := &req.Meta
	if m.BaseURL == "" {
		m.BaseURL = DefaultBaseURL(req.Kind)
	} else if err := CheckBaseURL(m.BaseURL); err != nil {
		bad("base_url: %v", err)
	}
	if m.Username != "" && (len(m.Username) > 256 || strings.ContainsFunc(m.Username, unicode.IsControl) || strings.ContainsAny(m.Username, " :")) {
		bad("username %q: want at most 256 characters without spaces, colons or control characters", m.Username)
	}
	if m.Host == "" && m.BaseURL != "" {
		switch req.Kind {
		case apiv1.SecretGitHTTPS:
			if u, err := url.Parse(m.BaseURL); err == nil {
				m.Host = strings.ToLower(u.Host)
			}
		case apiv1.SecretGitHubApp:
			m.Host = GitHubAppHost(m.BaseURL)
		}
	}
	switch {
	case m.Host != "":
		if _, err := netpolicy.ParsePattern(m.Host); err != nil {
			bad("host: %v", err)
		}
	case req.Kind == apiv1.SecretGitHTTPS:
		bad("a %s secret needs the git host it is for (host, e.g. github.com, or a base_url on that host), so profiles can check their repos are on it", req.Kind)
	}
	probs = append(probs, checkAppMeta(req.Kind, *m)...)
	if n := len(m.BaseURL) + len(m.Username) + len(m.Host) + len(m.AppID); n > maxSecretMetaBytes {
		bad("meta is %d bytes, at most %d", n, maxSecretMetaBytes)
	}
	return probs
}

// checkValue lists what is wrong with a secret's value, never quoting it.
func checkValue(kind string, v []byte) []string {
	switch {
	case len(v) == 0:
		return []string{"the value is empty"}
	case len(v) > maxSecretValueBytes:
		return []string{fmt.Sprintf("the value is %d bytes, at most %d", len(v), maxSecretValueBytes)}
	case kind == apiv1.SecretGitHubApp:
		if _, err := ghapp.ParsePrivateKey(v); err != nil {
			return []string{fmt.Sprintf("the value must be the app's private key (the .pem file GitHub made for it): %v", err)}
		}
	case kind != apiv1.SecretGeneric && (!utf8.Valid(v) || strings.ContainsFunc(string(v), unicode.IsControl) || strings.TrimSpace(string(v)) != string(v)):
		return []string{fmt.Sprintf("the value has control characters, line breaks or surrounding spaces, which a %s cannot hold (was a newline pasted with it?)", kind)}
	case strings.ContainsRune(string(v), 0):
		return []string{"the value has a NUL byte"}
	}
	return nil
}

// checkAppMeta checks the GitHub App fields: required for github_app
// secrets, absent from others.
func checkAppMeta(kind string, m apiv1.SecretMeta) []string {
	var probs []string
	if kind != apiv1.SecretGitHubApp {
		if m.AppID != "" || m.InstallationID != 0 {
			probs = append(probs, fmt.Sprintf("app_id and installation_id are for %s secrets, not %s", apiv1.SecretGitHubApp, kind))
		}
		return probs
	}
	if err := ghapp.CheckAppID(m.AppID); err != nil {
		probs = append(probs, err.Error())
	}
	if m.InstallationID <= 0 {
		probs = append(probs, "installation_id: want the id of the app's installation on the repositories' account (in its settings URL, .../installations/ID)")
	}
	if m.Username != "" {
		probs = append(probs, "username: a github_app secret logs in with the tokens it mints, as x-access-token")
	}
	return probs
}

// checkBaseURL accepts an absolute https URL without a login, query or
// fragment; plain http only to a loopback host (localhost, 127.0.0.0/8,
// ::1), where the key does not cross a network.
func CheckBaseURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return fmt.Errorf("%q: want an absolute https URL such as https://api.anthropic.com", s)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return fmt.Errorf("%q: want https; plain http only to this machine (localhost, 127.0.0.0/8 or ::1)", s)
	case u.User != nil:
		return fmt.Errorf("%q carries a login; the secret's value is the credential", s)
	case u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, " \t\r\n"):
		return fmt.Errorf("%q: want no query, fragment or spaces", s)
	}
	return nil
}

// loopbackHost reports whether host (without port) is this machine.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// List lists org's live secrets users made, by name, with the profiles
// naming each.
func (c *Vault) List(ctx context.Context, org domain.OrgID) ([]SecretView, error) {
	ss, err := c.st.ListSecrets(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", err)
	}
	uses, err := c.secretUses(ctx, org)
	if err != nil {
		return nil, err
	}
	out := make([]SecretView, 0, len(ss))
	for _, s := range ss {
		if !UserKind(s.Kind) {
			continue
		}
		out = append(out, secretView(s, uses[s.Name]))
	}
	return out, nil
}

func secretView(s domain.Secret, usedBy []string) SecretView {
	s.Sealed = nil
	v := SecretView{Secret: s, UsedBy: usedBy}
	_ = json.Unmarshal(s.Meta, &v.Meta) // meta is ours: written by CreateSecret
	return v
}

// secretUses maps the names of org's secrets to its live profiles naming them.
func (c *Vault) secretUses(ctx context.Context, org domain.OrgID) (map[string][]string, error) {
	ps, err := c.st.ListProfiles(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list profiles: %w", err)
	}
	uses := map[string][]string{}
	for _, p := range ps {
		var spec apiv1.ProfileSpec
		if err := json.Unmarshal(p.Spec, &spec); err != nil {
			continue // a profile whose spec cannot be read names nothing usable
		}
		names := slices.Clone(spec.Credentials)
		for _, r := range spec.Repos {
			names = append(names, r.Credential)
		}
		slices.Sort(names)
		for _, n := range slices.Compact(names) {
			if n != "" {
				uses[n] = append(uses[n], p.Name)
			}
		}
	}
	return uses, nil
}

// Delete deletes org's live secret by name (or id): its sealed bytes are
// erased and its name is free again. Profiles naming it cannot start tasks
// until a secret with that name exists again (the answer lists them).
func (c *Vault) Delete(ctx context.Context, org domain.OrgID, nameOrID string) (SecretView, error) {
	s, err := c.st.GetSecretByName(ctx, org, nameOrID)
	if errors.Is(err, store.ErrNotFound) {
		s, err = c.st.GetSecret(ctx, domain.SecretID(nameOrID))
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && (!UserKind(s.Kind) || s.Org != org)) {
		return SecretView{}, fmt.Errorf("secret %q: %w", nameOrID, store.ErrNotFound)
	}
	if err != nil {
		return SecretView{}, fmt.Errorf("find secret %s: %w", nameOrID, err)
	}
	if s.DeletedAt.IsZero() {
		if err := c.st.DeleteSecret(ctx, s.ID, c.now()); err != nil {
			return SecretView{}, fmt.Errorf("delete secret %s: %w", s.Name, err)
		}
		c.log.Info("secret deleted", "secret_id", s.ID, "name", s.Name, "kind", s.Kind)
		if s, err = c.st.GetSecret(ctx, s.ID); err != nil {
			return SecretView{}, fmt.Errorf("read deleted secret %s: %w", nameOrID, err)
		}
	}
	uses, err := c.secretUses(ctx, org)
	if err != nil {
		return SecretView{}, err
	}
	return secretView(s, uses[s.Name]), nil
}

// Open returns the secret with that id and its value. A deleted
// secret is ErrNotFound.
func (c *Vault) Open(ctx context.Context, id domain.SecretID) (domain.Secret, []byte, error) {
	s, err := c.st.GetSecret(ctx, id)
	if err != nil {
		return domain.Secret{}, nil, fmt.Errorf("open secret %s: %w", id, err)
	}
	if !s.DeletedAt.IsZero() || len(s.Sealed) == 0 {
		return domain.Secret{}, nil, fmt.Errorf("open secret %s (%s): it was deleted: %w", id, s.Name, store.ErrNotFound)
	}
	if c.secrets == nil {
		return domain.Secret{}, nil, fmt.Errorf("open secret %s: this server keeps no secrets key", s.Name)
	}
	plain, err := c.secrets.Open(s.Sealed, AssociatedData(s.ID))
	if err != nil {
		return domain.Secret{}, nil, fmt.Errorf("open secret %s: %w", s.Name, err)
	}
	s.Sealed = nil
	return s, plain, nil
}
