package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/broker"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/testutil"
)

const realToken = "ghp_REAL-token-7f3a9c"

// upstream is a fake git host: every request it got, and every byte. It
// answers with answer, or by default with what it got.
type upstream struct {
	answer http.Handler
	mu     sync.Mutex
	reqs   []*http.Request
	raw    strings.Builder // request heads and bodies as received
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, r)
	fmt.Fprintf(&u.raw, "%s %s %v\n%s\n", r.Method, r.URL, r.Header, body)
	u.mu.Unlock()
	if u.answer != nil {
		r.Body = io.NopCloser(bytes.NewReader(body))
		u.answer.ServeHTTP(w, r)
		return
	}
	fmt.Fprintf(w, "ok %s %s auth=%s body=%s", r.Method, r.URL.Path, r.Header.Get("Authorization"), body)
}

// lastAuth is the Authorization of the last request.
func (u *upstream) lastAuth() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		return ""
	}
	return u.reqs[len(u.reqs)-1].Header.Get("Authorization")
}

func (u *upstream) got() (int, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs), u.raw.String()
}

// env is a coordinator with host-a, the broker served as hosts reach it,
// and git.test served by up on 127.0.0.1 (the broker's dialer maps the
// name there).
type env struct {
	*coordinatortest.Env
	b      *broker.Broker
	link   string // the broker's host-link address
	up     *upstream
	events *recorder
	secret domain.Secret
}

// recorder keeps what the broker records.
type recorder struct {
	mu  sync.Mutex
	evs []hostlink.EgressEvent
}

func (r *recorder) Record(_ context.Context, _ domain.SessionID, _ int64, evs []hostlink.EgressEvent) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, evs...)
	return nil
}

func (r *recorder) reasons() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var b strings.Builder
	for _, e := range r.evs {
		fmt.Fprintf(&b, "%s %s:%d %s\n", e.Verdict, e.Host, e.Port, e.Reason)
	}
	return b.String()
}

// mapDialer dials every address at to.
type mapDialer struct{ to string }

func (d mapDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, d.to)
}

// newEnv serves git.test with a certificate for names from a CA the
// broker trusts when trusted is set.
func newEnv(t *testing.T, trusted bool, names ...string) *env {
	t.Helper()
	return newEnvWith(t, envConfig{trusted: trusted, names: names})
}

// envConfig is what an env differs by.
type envConfig struct {
	trusted bool
	names   []string              // the upstream certificate's
	secret  secrets.SecretRequest // zero: the git_https login bot:realToken
	apps    broker.AppTokens
	answer  http.Handler // the upstream's; nil: what it got
}

func newEnvWith(t *testing.T, cfg envConfig) *env {
	t.Helper()
	ca := testutil.NewCA(t)
	up := &upstream{answer: cfg.answer}
	ts := ca.TLSServer(t, up, cfg.names...)
	pool := ca.Pool
	if !cfg.trusted {
		pool = x509.NewCertPool()
	}
	e := coordinatortest.New(t, coordinator.Config{}, nil)
	vault, err := secrets.New(secrets.Deps{Store: e.St, Sealer: coordinatortest.Sealer{}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.secret.Name == "" {
		cfg.secret = secrets.SecretRequest{Org: domain.FirstOrg, Name: "gh", Kind: apiv1.SecretGitHTTPS, Value: []byte(realToken),
			Meta: apiv1.SecretMeta{Username: "bot", Host: "git.test"}}
	}
	v, err := vault.Create(t.Context(), cfg.secret)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	b, err := broker.New(broker.Config{}, broker.Deps{Store: e.St, Secrets: vault, Sealer: coordinatortest.Sealer{}, Events: rec,
		AppTokens: cfg.apps, Upstream: mapDialer{to: ts.Listener.Addr().String()}, RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	e.AddHost(t, "a", 8)
	e.KeepAlive(t, "host-a")
	mux := http.NewServeMux()
	b.RouteHostLink(mux)
	link := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(hostlink.WithHostID(r.Context(), "host-a")))
	}))
	t.Cleanup(link.Close)
	return &env{Env: e, b: b, link: link.Listener.Addr().String(), up: up, events: rec, secret: v.Secret}
}

// session starts an Active session on host-a brokering git.test:443 and,
// with the same credential, api.git.test:443 (as github.com and its API
// host are), and other.test:443 with another; git.test's grant is access
// (none: /repo with push and API use).
func (e *env) session(t *testing.T, access ...domain.RepoAccess) domain.Session {
	t.Helper()
	if len(access) == 0 {
		access = []domain.RepoAccess{{Path: "/repo", Push: true, API: true}}
	}
	s, err := e.Co.CreateSession(t.Context(), domain.SessionSpec{IdleTimeoutSec: -1,
		Brokered: []domain.BrokeredGrant{{Host: "git.test:443", SecretID: e.secret.ID, Access: access},
			{Host: "api.git.test:443", SecretID: e.secret.ID, Access: access}, {Host: "other.test:443", SecretID: "sec-other"}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	return e.Wait(t, s.ID, domain.SessionActive)
}

// guest opens a brokered connection for s as a host would, and a TLS
// client on it that trusts the deployment CA (the guest's view).
func (e *env) guest(t *testing.T, s domain.Session, sni string) (*tls.Conn, error) {
	t.Helper()
	c, err := hostlink.DialBroker(t.Context(), func() (net.Conn, error) { return net.Dial("tcp", e.link) }, string(s.ID), s.Epoch, "git.test:443")
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	pem, err := e.b.CACert(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool})
	return tc, tc.HandshakeContext(t.Context())
}

func (e *env) placeholder(t *testing.T, s domain.Session) string {
	t.Helper()
	ph, err := e.b.Placeholder(t.Context(), s.ID, "git.test:443")
	if err != nil {
		t.Fatal(err)
	}
	return ph
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// roundTrip writes raw on c and reads one answer.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		return nil, "write: " + err.Error()
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "read: " + err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func TestBrokerPutsTheCredentialInOnItsHostOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "git.test")
	s := e.session(t)
	ph := e.placeholder(t, s)
	other, err := e.b.Placeholder(t.Context(), "another-session", "git.test:443")
	if err != nil {
		t.Fatal(err)
	}
	peer, err := e.b.Placeholder(t.Context(), s.ID, "api.git.test:443")
	if err != nil {
		t.Fatal(err)
	}
	otherCred, err := e.b.Placeholder(t.Context(), s.ID, "other.test:443")
	if err != nil {
		t.Fatal(err)
	}
	get := func(host, auth string, extra ...string) string {
		h := "GET /repo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: " + host + "\r\n"
		if auth != "" {
			h += "Authorization: " + auth + "\r\n"
		}
		return h + strings.Join(extra, "") + "\r\n"
	}
	chunked := "POST /repo.git/git-receive-pack HTTP/1.1\r\nHost: git.test\r\nTransfer-Encoding: chunked\r\nAuthorization: " + basic("x", ph) +
		"\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len("data "+ph), "data "+ph)
	big := get("git.test", basic("x", ph), "X-Pad: "+strings.Repeat("a", 70<<10)+"\r\n")
	for _, tt := range []struct {
		name     string
		reqs     []string // on one keep-alive connection
		status   []int
		upstream int    // requests the upstream gets
		body     string // in the last answer
		sent     string // the Authorization the upstream got last ("-": not looked at)
	}{
		{"Basic placeholder as the password", []string{get("git.test", basic("x-access-token", ph))}, []int{200}, 1, "ok GET", basic("bot", realToken)},
		{"Bearer placeholder, a second request on the connection too",
			[]string{get("git.test", "Bearer "+ph), get("git.test:443", "token "+ph)}, []int{200, 200}, 2, "auth=token " + ph, "token " + realToken},
		{"the guest's own credential is dropped", []string{get("git.test", "Bearer guest-token")}, []int{200}, 1, "auth= body=", ""},
		{"a second request for another host on a keep-alive connection",
			[]string{get("git.test", "Bearer "+ph), get("other.test", "Bearer "+ph)}, []int{200, 421}, 1, "differs from the brokered host", "-"},
		{"another session's placeholder", []string{get("git.test", basic("x", other))}, []int{403}, 0, "not this session's", "-"},
		{"the placeholder of a host granted the same credential", []string{get("git.test", "Bearer "+peer)}, []int{200}, 1, "auth=Bearer " + ph, "Bearer " + realToken},
		{"the placeholder of a host granted another credential", []string{get("git.test", "Bearer "+otherCred)}, []int{403}, 0, "not this session's", "-"},
		{"a placeholder in another header", []string{get("git.test", "", "X-Token: "+ph+"\r\n")}, []int{403}, 0, "in the X-Token header", "-"},
		{"a placeholder in a chunked body is not substituted", []string{chunked}, []int{200}, 1, "body=data " + ph, basic("bot", realToken)},
		{"a placeholder after 64 KiB of headers", []string{big}, []int{431}, 0, "", "-"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := e.up.got()
			tc, err := e.guest(t, s, "git.test")
			if err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(tc)
			var body string
			for i, raw := range tt.reqs {
				var resp *http.Response
				resp, body = roundTrip(t, tc, br, raw)
				if resp == nil || resp.StatusCode != tt.status[i] {
					t.Fatalf("request %d: %v %q, want %d (events %s)", i, resp, body, tt.status[i], e.events.reasons())
				}
			}
			n, _ := e.up.got()
			if got := e.up.lastAuth(); !strings.Contains(body, tt.body) || n-before != tt.upstream || tt.sent != "-" && got != tt.sent {
				t.Errorf("answer %q after %d upstream requests, the last with Authorization %q; want it to hold %q after %d, with %q",
					body, n-before, got, tt.body, tt.upstream, tt.sent)
			}
		})
	}
	if _, raw := e.up.got(); strings.Contains(raw, ph) && !strings.Contains(raw, "data "+ph) {
		t.Errorf("a placeholder reached the upstream outside a body: %s", raw)
	}
	if r := e.events.reasons(); !strings.Contains(r, `allow git.test:443 brokered GET "/repo.git/info/refs?service=git-upload-pack" (git fetch): the session's placeholder replaced`) ||
		!strings.Contains(r, "deny git.test:443 Host") {
		t.Errorf("events:\n%s", r)
	}
}

// TestBrokerRefusesUpstreamsItCannotVerify: a self-signed or wrong-name
// upstream gets no request, hence no credential byte.
func TestBrokerRefusesUpstreamsItCannotVerify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		trusted bool
		names   []string
	}{
		{"a certificate from a CA the broker does not trust", false, []string{"git.test"}},
		{"a certificate for another name", true, []string{"other.test"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tt.trusted, tt.names...)
			s := e.session(t)
			tc, err := e.guest(t, s, "git.test")
			if err != nil {
				t.Fatal(err)
			}
			resp, body := roundTrip(t, tc, bufio.NewReader(tc), "GET /repo/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: git.test\r\nAuthorization: Bearer "+e.placeholder(t, s)+"\r\n\r\n")
			if resp == nil || resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
				t.Errorf("%v %q, want 502 naming the certificate", resp, body)
			}
			if n, raw := e.up.got(); n != 0 {
				t.Errorf("the upstream got %d requests: %s", n, raw)
			}
		})
	}
}

// TestBrokerAdmission: only the session's host at its epoch, only its
// brokered hosts, only the brokered name as SNI.
func TestBrokerAdmission(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, "git.test")
	s := e.session(t)
	dial := func() (net.Conn, error) { return net.Dial("tcp", e.link) }
	for _, tt := range []struct {
		name  string
		epoch int64
		host  string
		want  string
	}{
		{"a stale epoch", s.Epoch - 1, "git.test:443", "409"},
		{"a host that is not brokered", s.Epoch, "unbrokered.test:443", "403"},
		{"another port", s.Epoch, "git.test:8443", "403"},
	} {
		_, err := hostlink.DialBroker(t.Context(), dial, string(s.ID), tt.epoch, tt.host)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.want)
		}
	}
	if _, err := e.guest(t, s, "other.test"); err == nil {
		t.Error("a handshake for another name succeeded")
	}
}
