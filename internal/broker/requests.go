package broker

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
)

// requests serves the requests of one terminated connection: each must
// name the brokered host (Host = SNI) and be one the grant allows (a git
// fetch or push, or an API call, of a granted repository: policy.go);
// anything else is refused before a byte goes upstream. The guest's
// Authorization is dropped, and when it carried this session's
// placeholder for this host, the real credential is put in its place. A
// placeholder anywhere else (another header, another session's or host's)
// is refused and the connection closed. Request bodies pass through
// untouched; answers are scrubbed of the credential (forward).
func (b *Broker) requests(c *conn) http.Handler {
	role := roleOf(c.name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		deny := func(status int, reason string) {
			b.record(ctx, c, denyEvent(reason))
			w.Header().Set("Connection", "close")
			http.Error(w, "engrams credential broker: "+reason, status)
		}
		if name, port, ok := hostAuthority(r.Host, 443); !ok || name != c.name || port != c.port {
			deny(http.StatusMisdirectedRequest, fmt.Sprintf("Host %.80q differs from the brokered host %s:%d this connection is for", r.Host, c.name, c.port))
			return
		}
		want, err := b.placeholders(ctx, c)
		if err != nil {
			c.log.Error("broker: placeholder", "err", err)
			deny(http.StatusInternalServerError, "the broker has no placeholder key")
			return
		}
		scheme, presented, err := presentedPlaceholder(r.Header, want...)
		if err != nil {
			deny(http.StatusForbidden, err.Error())
			return
		}
		line := fmt.Sprintf("%.10s %.120q", r.Method, r.RequestURI)
		allow, err := judge(c.grant.Access, role, r.Method, r.RequestURI)
		if err != nil {
			deny(http.StatusForbidden, "refused "+line+": "+err.Error())
			return
		}
		cr, sc, err := c.credential(ctx, b, allow.repo)
		if err != nil {
			c.log.Warn("broker: credential", "err", err)
			deny(http.StatusBadGateway, "the session's credential for this host cannot be used: "+err.Error())
			return
		}
		auth, reason := "", "brokered "+line+" ("+allow.what+"): no placeholder sent, forwarded without a credential"
		if presented {
			auth, reason = cr.authorization(scheme), "brokered "+line+" ("+allow.what+"): the session's placeholder replaced by its credential"
		}
		b.forward(w, r, c, auth, sc, reason)
	})
}

// placeholders are those put in on c: this session's for c's host and for
// the hosts granted the same credential.
func (b *Broker) placeholders(ctx context.Context, c *conn) ([]string, error) {
	want := make([]string, 0, len(c.peers))
	for _, h := range c.peers {
		ph, err := b.Placeholder(ctx, c.sid, h)
		if err != nil {
			return nil, err
		}
		want = append(want, ph)
	}
	return want, nil
}

// hostAuthority splits a Host header into a lower-case name and a port
// (def when it names none).
func hostAuthority(host string, def uint16) (string, uint16, bool) {
	name, portText, err := net.SplitHostPort(host)
	if err != nil {
		name, portText = host, strconv.Itoa(int(def))
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || name == "" {
		return "", 0, false
	}
	return strings.ToLower(strings.TrimSuffix(name, ".")), uint16(port), true
}

// presentedPlaceholder finds the placeholder a request carries: in its
// Authorization only (Basic, as user or password; Bearer; token), and
// only one of want. scheme is how it was sent: "basic", "bearer" or "token".
func presentedPlaceholder(h http.Header, want ...string) (scheme string, ok bool, err error) {
	for name, vals := range h {
		if name == "Authorization" {
			continue
		}
		for _, v := range vals {
			if strings.Contains(v, domain.PlaceholderPrefix) {
				return "", false, fmt.Errorf("a credential placeholder in the %s header: placeholders go in Authorization only", name)
			}
		}
	}
	auths := h.Values("Authorization")
	if len(auths) == 0 {
		return "", false, nil
	}
	if len(auths) > 1 {
		return "", false, errors.New("more than one Authorization header")
	}
	s, cred, _ := strings.Cut(strings.TrimSpace(auths[0]), " ")
	scheme, cred = strings.ToLower(s), strings.TrimSpace(cred)
	candidates := []string{cred}
	if scheme == "basic" {
		dec, err := base64.StdEncoding.DecodeString(cred)
		if err != nil {
			return "", false, nil // not a placeholder; dropped
		}
		user, pass, _ := strings.Cut(string(dec), ":")
		candidates = []string{user, pass}
	}
	for _, cand := range candidates {
		if !strings.Contains(cand, domain.PlaceholderPrefix) {
			continue
		}
		if scheme != "basic" && scheme != "bearer" && scheme != "token" {
			return "", false, fmt.Errorf("a credential placeholder in an Authorization of scheme %.20q", scheme)
		}
		for _, w := range want {
			if subtle.ConstantTimeCompare([]byte(cand), []byte(w)) == 1 {
				return scheme, true, nil
			}
		}
		return "", false, errors.New("a credential placeholder that is not this session's for this host: not substituted")
	}
	return "", false, nil
}

// gitMeta is what the broker reads of a git credential's meta.
type gitMeta struct {
	Username       string `json:"username"`
	AppID          string `json:"app_id"`
	InstallationID int64  `json:"installation_id"`
	BaseURL        string `json:"base_url"`
}

// cred is a credential as the broker sends it: a login's user and token.
type cred struct {
	user, token string
}

// authorization is cr's Authorization value in scheme: Basic user:token,
// or the token alone.
func (cr cred) authorization(scheme string) string {
	switch scheme {
	case "basic":
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(cr.user+":"+cr.token))
	case "token":
		return "token " + cr.token
	}
	return "Bearer " + cr.token
}

// credential is c's granted secret as sent for a request to repo (a
// GitHub App's token is minted with what repo grants), opened once per
// connection and kind of access (its requests come one at a time; a
// connection ends after IdleTimeout without one), and the scrubber of
// every credential opened on c so far.
func (c *conn) credential(ctx context.Context, b *Broker, repo domain.RepoAccess) (cred, *scrubber, error) {
	k := accessKind{push: repo.Push, api: repo.API}
	if cr, ok := c.creds[k]; ok {
		return cr, c.scrub, nil
	}
	cr, err := b.openCredential(ctx, c, k)
	if err != nil {
		return cred{}, nil, err
	}
	if c.creds == nil {
		c.creds = map[accessKind]cred{}
	}
	c.creds[k] = cr
	var secrets []string
	for _, o := range c.creds {
		secrets = append(secrets, o.user+":"+o.token, o.token)
	}
	ph, err := b.Placeholder(ctx, c.sid, net.JoinHostPort(c.name, strconv.Itoa(int(c.port))))
	if err != nil {
		return cred{}, nil, err
	}
	c.scrub = newScrubber(ph, secrets...)
	return cr, c.scrub, nil
}

// accessKind is what a repository of a grant allows, which a GitHub App
// token is minted for.
type accessKind struct{ push, api bool }

// appPermissions are the permissions of a GitHub App token for access of
// kind k: metadata to read; contents to read, or write with push; with
// API use, pull requests and issues likewise.
func appPermissions(k accessKind) map[string]string {
	level := "read"
	if k.push {
		level = "write"
	}
	p := map[string]string{"metadata": "read", "contents": level}
	if k.api {
		p["pull_requests"], p["issues"] = level, level
	}
	return p
}

// openCredential opens c's granted secret: a git_https login as stored,
// or a GitHub App's installation token scoped to the grant's repositories
// of kind k, with k's permissions.
func (b *Broker) openCredential(ctx context.Context, c *conn, k accessKind) (cred, error) {
	s, value, err := b.vault.Open(ctx, c.grant.SecretID)
	if err != nil {
		return cred{}, fmt.Errorf("open the secret: %w", err)
	}
	defer clear(value)
	var meta gitMeta
	_ = json.Unmarshal(s.Meta, &meta)
	cr := cred{user: meta.Username, token: string(value)}
	switch s.Kind {
	case apiv1.SecretGitHTTPS:
	case apiv1.SecretGitHubApp:
		if b.apps == nil {
			return cred{}, errors.New("this server mints no GitHub App tokens")
		}
		app, err := ghapp.NewApp(meta.AppID, meta.InstallationID, meta.BaseURL, value)
		if err != nil {
			return cred{}, err
		}
		var names []string
		for _, a := range c.grant.Access {
			if (accessKind{push: a.Push, api: a.API}) == k {
				names = append(names, a.Name())
			}
		}
		t, err := b.apps.Token(ctx, app, names, appPermissions(k))
		if err != nil {
			return cred{}, err
		}
		cr = cred{user: "x-access-token", token: t.Token}
	default:
		return cred{}, fmt.Errorf("a %s secret is not brokered", s.Kind)
	}
	if cr.user == "" {
		cr.user = "x-access-token"
	}
	return cr, nil
}
