package broker

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
)

// requests serves the requests of one terminated connection: each must
// name the brokered host (Host = SNI); the guest's Authorization is
// dropped, and when it carried this session's placeholder for this host,
// the real credential is put in its place. A placeholder anywhere else
// (another header, another session's or host's) is refused and the
// connection closed. Bodies pass through untouched: nothing is ever
// substituted in them.
func (b *Broker) requests(c *conn) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		deny := func(status int, reason string) {
			b.record(ctx, c, hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressDeny, Reason: reason})
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
		r.Header.Del("Authorization")
		r.Header.Del("Proxy-Authorization")
		reason := "brokered " + r.Method + ": no placeholder sent, forwarded without a credential"
		if presented {
			auth, err := c.credential(ctx, b, scheme)
			if err != nil {
				c.log.Warn("broker: credential", "err", err)
				deny(http.StatusBadGateway, "the session's credential for this host cannot be used: "+err.Error())
				return
			}
			r.Header.Set("Authorization", auth)
			reason = "brokered " + r.Method + ": the session's placeholder replaced by its credential"
		}
		b.forward(w, r, c, reason)
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

// credential is the Authorization value of c's granted secret in scheme,
// opened once per connection (its requests come one at a time; a
// connection ends after IdleTimeout without one).
func (c *conn) credential(ctx context.Context, b *Broker, scheme string) (string, error) {
	if auth, ok := c.auth[scheme]; ok {
		return auth, nil
	}
	auth, err := b.openCredential(ctx, c, scheme)
	if err != nil {
		return "", err
	}
	if c.auth == nil {
		c.auth = map[string]string{}
	}
	c.auth[scheme] = auth
	return auth, nil
}

// openCredential is the Authorization value of c's granted secret, in the
// scheme the guest used: Basic user:token, or the token alone.
func (b *Broker) openCredential(ctx context.Context, c *conn, scheme string) (string, error) {
	s, value, err := b.vault.Open(ctx, c.grant.SecretID)
	if err != nil {
		return "", fmt.Errorf("open the secret: %w", err)
	}
	defer clear(value)
	var meta gitMeta
	_ = json.Unmarshal(s.Meta, &meta)
	token, user := string(value), meta.Username
	switch s.Kind {
	case apiv1.SecretGitHTTPS:
	case apiv1.SecretGitHubApp:
		if b.apps == nil {
			return "", errors.New("this server mints no GitHub App tokens")
		}
		app, err := ghapp.NewApp(meta.AppID, meta.InstallationID, meta.BaseURL, value)
		if err != nil {
			return "", err
		}
		t, err := b.apps.Token(ctx, app, c.grant.Repos)
		if err != nil {
			return "", err
		}
		token, user = t.Token, "x-access-token"
	default:
		return "", fmt.Errorf("a %s secret is not brokered", s.Kind)
	}
	if user == "" {
		user = "x-access-token"
	}
	switch scheme {
	case "basic":
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+token)), nil
	case "token":
		return "token " + token, nil
	}
	return "Bearer " + token, nil
}

// forward sends r to the brokered host over verified TLS and streams the
// answer back.
func (b *Broker) forward(w http.ResponseWriter, r *http.Request, c *conn, reason string) {
	host := c.name
	if c.port != 443 {
		host = net.JoinHostPort(c.name, strconv.Itoa(int(c.port)))
	}
	status := 0
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", net.JoinHostPort(c.name, strconv.Itoa(int(c.port)))
			pr.Out.Host = host
		},
		Transport:     b.upstream,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			status = resp.StatusCode
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			msg := upstreamFailure(err, host)
			c.log.Warn("broker: upstream", "err", err)
			b.record(r.Context(), c, hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressDeny, Reason: msg})
			w.Header().Set("Connection", "close")
			http.Error(w, "engrams credential broker: "+msg, http.StatusBadGateway)
			status = -1
		},
	}
	rp.ServeHTTP(w, r)
	if status >= 0 {
		b.record(r.Context(), c, hostlink.EgressEvent{Kind: hostlink.EgressTLS, Verdict: hostlink.EgressAllow,
			Reason: fmt.Sprintf("%s; upstream answered %d", reason, status)})
	}
}

// upstreamFailure says why the upstream could not be reached.
func upstreamFailure(err error, host string) string {
	var verr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verr):
		return fmt.Sprintf("%s's TLS certificate is not valid for it (not sent: the request and its credential)", host)
	case errors.Is(err, netpolicy.ErrBlocked):
		return fmt.Sprintf("%s is at an address this server does not reach (loopback, private or link-local)", host)
	}
	return fmt.Sprintf("could not reach %s", host)
}
