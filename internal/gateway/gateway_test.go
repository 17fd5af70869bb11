package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
)

// upstream is a fake model provider on 127.0.0.1 that records what it got.
type upstream struct {
	mu   sync.Mutex
	reqs []upstreamReq
	h    http.HandlerFunc // answers; nil: 200 {"ok":true}
}

type upstreamReq struct {
	Method, Path, Query string
	Header              http.Header
	Body                string
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.reqs = append(u.reqs, upstreamReq{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: string(b)})
	h := u.h
	u.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"ok":true}`)
}

func (u *upstream) got() []upstreamReq {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]upstreamReq(nil), u.reqs...)
}

// syncLog is a log buffer safe for concurrent writers.
type syncLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// gwEnv is a coordinator with one host ("host-a"), the model gateway served
// as hosts reach it (the host id comes from the test header X-Test-Host)
// and a fake upstream.
type gwEnv struct {
	*coordinatortest.Env
	st    store.Store
	co    *coordinator.Coordinator
	gw    *Gateway
	vault *secrets.Vault
	url   string // the gateway's host handler
	up    *upstream
	upTS  *httptest.Server
	log   *syncLog
}

func newGatewayEnv(t *testing.T, cfg Config, tls bool, trust bool) *gwEnv {
	t.Helper()
	return newGatewayEnvWith(t, cfg, tls, trust, loopback())
}

// loopback lets the gateway reach providers on this machine, as tests'
// scripted model servers are.
func loopback() Providers {
	return netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})
}

// newGatewayEnvWith is newGatewayEnv reaching providers through providers.
func newGatewayEnvWith(t *testing.T, cfg Config, tls, trust bool, providers Providers) *gwEnv {
	t.Helper()
	up := &upstream{}
	var upTS *httptest.Server
	if tls {
		upTS = httptest.NewTLSServer(up)
	} else {
		upTS = httptest.NewServer(up)
	}
	t.Cleanup(upTS.Close)
	var pool *x509.CertPool
	if trust {
		pool = x509.NewCertPool()
		pool.AddCert(upTS.Certificate())
	}
	logs := &syncLog{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := coordinatortest.New(t, coordinator.Config{}, nil)
	vault, err := secrets.New(secrets.Deps{Store: e.St, Sealer: coordinatortest.Sealer{}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	gw, err := New(cfg, Deps{Store: e.St, Secrets: vault, Sealer: coordinatortest.Sealer{}, Providers: providers, RootCAs: pool, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	e.AddHost(t, "a", 8)
	e.KeepAlive(t, "host-a")
	mux := http.NewServeMux()
	gw.RouteHostLink(mux)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := hostlink.LinkInfo{HostID: domain.HostID(r.Header.Get("X-Test-Host")), TokenID: r.Header.Get("X-Test-Token")}
		mux.ServeHTTP(w, r.WithContext(hostlink.WithLink(r.Context(), l)))
	}))
	t.Cleanup(ts.Close)
	return &gwEnv{Env: e, st: e.St, co: e.Co, gw: gw, vault: vault, url: ts.URL, up: up, upTS: upTS, log: logs}
}

// secret stores a model key the gateway may use.
func (g *gwEnv) secret(t *testing.T, kind, name, value, baseURL string) domain.Secret {
	t.Helper()
	v, err := g.vault.Create(context.Background(), secrets.SecretRequest{Org: domain.FirstOrg, Name: name, Kind: kind, Value: []byte(value), Meta: apiv1.SecretMeta{BaseURL: baseURL}})
	if err != nil {
		t.Fatal(err)
	}
	return v.Secret
}

// session starts an Active session on host-a granted these secrets.
func (g *gwEnv) session(t *testing.T, grants ...domain.Secret) domain.Session {
	t.Helper()
	spec := domain.SessionSpec{IdleTimeoutSec: -1}
	for _, s := range grants {
		spec.Credentials = append(spec.Credentials, domain.CredentialGrant{Kind: s.Kind, SecretID: s.ID})
	}
	s, err := g.co.CreateSession(context.Background(), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	return g.Wait(t, s.ID, domain.SessionActive)
}

func (g *gwEnv) placeholder(t *testing.T, sid domain.SessionID, kind string) string {
	t.Helper()
	ph, err := g.gw.Placeholder(context.Background(), sid, kind)
	if err != nil {
		t.Fatal(err)
	}
	return ph
}

// send is one request as a host forwards it: path is "/<kind>/<rest>".
func (g *gwEnv) send(t *testing.T, hostID string, sid domain.SessionID, method, path string, hdr map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, g.url+hostlink.PathGateway+string(sid)+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-Host", hostID)
	if hostID == "host-a" {
		req.Header.Set("X-Test-Token", "tok-a") // the link's token, as coordinatortest mints it
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestGatewayForwardsWithTheRealKey(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	oai := g.secret(t, apiv1.SecretOpenAIAPIKey, "oai", "sk-oai-REAL", g.upTS.URL+"/v1")
	s := g.session(t, ant, oai)
	tests := []struct {
		name, kind, path, header, wantPath, wantQuery, wantHeader, wantValue string
	}{
		{"anthropic x-api-key", apiv1.SecretAnthropicAPIKey, "/v1/messages?beta=true", "X-Api-Key",
			"/v1/messages", "beta=true", "X-Api-Key", "sk-ant-REAL"},
		{"openai bearer", apiv1.SecretOpenAIAPIKey, "/responses", "Authorization",
			"/v1/responses", "", "Authorization", "Bearer sk-oai-REAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ph := g.placeholder(t, s.ID, tt.kind)
			val := ph
			if tt.header == "Authorization" {
				val = "Bearer " + ph
			}
			resp := g.send(t, "host-a", s.ID, http.MethodPost, "/"+tt.kind+tt.path,
				map[string]string{tt.header: val, "Engrams-Epoch": "7", "Anthropic-Version": "2023-06-01"}, `{"model":"m"}`)
			if body := readAll(t, resp); resp.StatusCode != http.StatusOK || body != `{"ok":true}` {
				t.Fatalf("answer %d %s", resp.StatusCode, body)
			}
			reqs := g.up.got()
			r := reqs[len(reqs)-1]
			if r.Path != tt.wantPath || r.Query != tt.wantQuery || r.Body != `{"model":"m"}` || r.Method != http.MethodPost {
				t.Errorf("upstream got %s %s?%s %q", r.Method, r.Path, r.Query, r.Body)
			}
			if got := r.Header.Get(tt.wantHeader); got != tt.wantValue {
				t.Errorf("upstream %s = %q, want the real key", tt.wantHeader, got)
			}
			other := map[string]string{"X-Api-Key": "Authorization", "Authorization": "X-Api-Key"}[tt.wantHeader]
			if r.Header.Get(other) != "" || r.Header.Get("Engrams-Epoch") != "" || r.Header.Get("Anthropic-Version") != "2023-06-01" {
				t.Errorf("upstream headers %v: want only the real key's header, no engrams headers, the rest kept", r.Header)
			}
			for k, vs := range r.Header {
				if strings.Contains(strings.Join(vs, " "), placeholderPrefix) {
					t.Errorf("upstream header %s carries the placeholder", k)
				}
			}
		})
	}
	logs := g.log.String()
	for _, leak := range []string{"sk-ant-REAL", "sk-oai-REAL", placeholderPrefix} {
		if strings.Contains(logs, leak) {
			t.Errorf("the log holds %q:\n%s", leak, logs)
		}
	}
	if !strings.Contains(logs, "gateway request") || !strings.Contains(logs, "session_id="+string(s.ID)) {
		t.Errorf("no gateway request logged with its session:\n%s", logs)
	}
}

func TestGatewayRefusals(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	oai := g.secret(t, apiv1.SecretOpenAIAPIKey, "oai", "sk-oai-REAL", g.upTS.URL+"/v1")
	s := g.session(t, ant)
	other := g.session(t, ant, oai)
	gone := g.session(t, ant)
	if _, err := g.co.DeleteSession(context.Background(), gone.ID); err != nil {
		t.Fatal(err)
	}
	g.Wait(t, gone.ID, domain.SessionCompleted)
	const ak = apiv1.SecretAnthropicAPIKey
	tests := []struct {
		name, host        string
		sid               domain.SessionID
		kind, header, key string
		status            int
		errType           string
	}{
		{"wrong placeholder", "host-a", s.ID, ak, "X-Api-Key", "engrams-ph-nope", 401, "authentication_error"},
		{"no key", "host-a", s.ID, ak, "", "", 401, "authentication_error"},
		{"the real key itself", "host-a", s.ID, ak, "X-Api-Key", "sk-ant-REAL", 401, "authentication_error"},
		{"another session's placeholder", "host-a", s.ID, ak, "X-Api-Key", g.placeholder(t, other.ID, ak), 401, "authentication_error"},
		{"another kind's placeholder", "host-a", other.ID, ak, "X-Api-Key", g.placeholder(t, other.ID, apiv1.SecretOpenAIAPIKey), 401, "authentication_error"},
		{"from another host", "host-b", s.ID, ak, "X-Api-Key", g.placeholder(t, s.ID, ak), 403, "permission_error"},
		{"not from a host", "", s.ID, ak, "X-Api-Key", g.placeholder(t, s.ID, ak), 401, "authentication_error"},
		{"kind not granted", "host-a", s.ID, apiv1.SecretOpenAIAPIKey, "Authorization", "Bearer " + g.placeholder(t, s.ID, apiv1.SecretOpenAIAPIKey), 403, ""}, // OpenAI's shape
		{"kind not served", "host-a", s.ID, apiv1.SecretGitHTTPS, "Authorization", "Bearer " + g.placeholder(t, s.ID, apiv1.SecretGitHTTPS), 404, "not_found_error"},
		{"unknown session", "host-a", "no-such-session", ak, "X-Api-Key", g.placeholder(t, "no-such-session", ak), 403, "permission_error"},
		{"session deleted", "host-a", gone.ID, ak, "X-Api-Key", g.placeholder(t, gone.ID, ak), 403, "permission_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.header != "" {
				hdr[tt.header] = tt.key
			}
			resp := g.send(t, tt.host, tt.sid, http.MethodPost, "/"+tt.kind+"/v1/messages", hdr, `{}`)
			body := readAll(t, resp)
			if resp.StatusCode != tt.status || resp.Header.Get("X-Should-Retry") != "false" {
				t.Fatalf("answer %d (x-should-retry %q) %s, want %d, not to be retried", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body, tt.status)
			}
			if strings.Contains(body, string(tt.sid)) {
				t.Errorf("the answer names the session: %s", body)
			}
			if tt.errType != "" {
				var eb struct {
					Type  string `json:"type"`
					Error struct{ Type, Message string }
				}
				if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Type != "error" || eb.Error.Type != tt.errType || eb.Error.Message == "" {
					t.Errorf("error body %s: want Anthropic's shape with type %s", body, tt.errType)
				}
			}
		})
	}
	if n := len(g.up.got()); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
	// OpenAI's clients get OpenAI's error shape.
	resp := g.send(t, "host-a", other.ID, http.MethodPost, "/"+apiv1.SecretOpenAIAPIKey+"/responses", map[string]string{"Authorization": "Bearer wrong"}, `{}`)
	var oe struct {
		Error struct{ Message, Type, Code string }
	}
	if body := readAll(t, resp); resp.StatusCode != 401 || json.Unmarshal([]byte(body), &oe) != nil || oe.Error.Code != "invalid_api_key" {
		t.Errorf("openai refusal %d %s", resp.StatusCode, body)
	}
}

// TestGatewayHidesInternalErrors: a failure that is not a refusal (here a
// grant naming a secret of another kind) answers a generic message; the
// detail, with the secret's id, is only logged.
func TestGatewayHidesInternalErrors(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	oai := g.secret(t, apiv1.SecretOpenAIAPIKey, "oai", "sk-oai-REAL", g.upTS.URL)
	spec := domain.SessionSpec{IdleTimeoutSec: -1,
		Credentials: []domain.CredentialGrant{{Kind: apiv1.SecretAnthropicAPIKey, SecretID: oai.ID}}}
	created, err := g.co.CreateSession(context.Background(), spec, "")
	if err != nil {
		t.Fatal(err)
	}
	s := g.Wait(t, created.ID, domain.SessionActive)
	resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages",
		map[string]string{"X-Api-Key": g.placeholder(t, s.ID, apiv1.SecretAnthropicAPIKey)}, `{}`)
	body := readAll(t, resp)
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, `"type":"api_error"`) {
		t.Fatalf("answer %d %s, want a 500 in Anthropic's shape", resp.StatusCode, body)
	}
	for _, leak := range []string{string(oai.ID), oai.Name, string(s.ID), "openai_api_key"} {
		if strings.Contains(body, leak) {
			t.Errorf("the answer quotes %q: %s", leak, body)
		}
	}
	if logs := g.log.String(); !strings.Contains(logs, "gateway request failed") || !strings.Contains(logs, string(oai.ID)) ||
		!strings.Contains(logs, "session_id="+string(s.ID)) || !strings.Contains(logs, "kind=anthropic_api_key") {
		t.Errorf("the detail is not logged with the session and kind:\n%s", logs)
	}
	if len(g.up.got()) != 0 {
		t.Fatal("the request reached upstream")
	}
}

func TestGatewayDeletedSecretIsRefused(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	s := g.session(t, ant)
	if _, err := g.vault.Delete(context.Background(), domain.FirstOrg, "ant"); err != nil {
		t.Fatal(err)
	}
	resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages", map[string]string{"X-Api-Key": g.placeholder(t, s.ID, "anthropic_api_key")}, `{}`)
	if body := readAll(t, resp); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "deleted") {
		t.Fatalf("answer %d %s, want 401 naming the deleted credential", resp.StatusCode, body)
	}
	if len(g.up.got()) != 0 {
		t.Fatal("the request reached upstream")
	}
}

// TestGatewayRefusesStoppedTask: the session of a stopped or failed task,
// running again (task diff and files resume it), may not use the model;
// the answer names neither the task nor the session.
func TestGatewayRefusesStoppedTask(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ctx := context.Background()
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	p, err := g.st.CreateProfile(ctx, domain.Profile{ID: "p1", Org: domain.FirstOrg, Name: "p", Spec: json.RawMessage(`{}`), CreatedAt: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		state  domain.TaskState
		status int
	}{
		{domain.TaskRunning, http.StatusOK},
		{domain.TaskIdle, http.StatusOK},
		{domain.TaskStopped, http.StatusForbidden},
		{domain.TaskFailed, http.StatusForbidden},
	}
	for _, tt := range tests {
		s := g.session(t, ant)
		task, err := g.st.CreateTask(ctx, domain.Task{ID: domain.TaskID("task-" + string(tt.state)), ProfileID: p.ID, ProfileVersion: p.Version,
			Receipt: json.RawMessage(`{}`), SessionID: s.ID, CreatedAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.st.SetTaskState(ctx, task.ID, tt.state, "", time.Now()); err != nil {
			t.Fatal(err)
		}
		resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages",
			map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}, `{}`)
		body := readAll(t, resp)
		if resp.StatusCode != tt.status {
			t.Fatalf("task %s: answer %d %s, want %d", tt.state, resp.StatusCode, body, tt.status)
		}
		if tt.status == http.StatusOK {
			continue
		}
		var eb struct {
			Error struct{ Type, Message string }
		}
		if resp.Header.Get("X-Should-Retry") != "false" || json.Unmarshal([]byte(body), &eb) != nil ||
			eb.Error.Type != "permission_error" || !strings.Contains(eb.Error.Message, "the task was stopped") {
			t.Errorf("task %s: answer (x-should-retry %q) %s: want a final permission_error saying the task was stopped",
				tt.state, resp.Header.Get("X-Should-Retry"), body)
		}
		if strings.Contains(body, string(task.ID)) || strings.Contains(body, string(s.ID)) {
			t.Errorf("task %s: the answer names the task or session: %s", tt.state, body)
		}
	}
	if n := len(g.up.got()); n != 2 {
		t.Errorf("upstream got %d requests, want the 2 of the live tasks", n)
	}
}

func TestGatewayUpstreamRefusalIsNotRetried(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	g.up.h = func(w http.ResponseWriter, r *http.Request) {
		status := http.StatusUnauthorized
		if strings.HasSuffix(r.URL.Path, "/count_tokens") {
			status = 529
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`)
	}
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REVOKED", g.upTS.URL)
	s := g.session(t, ant)
	ph := map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}
	resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages", ph, `{}`)
	if body := readAll(t, resp); resp.StatusCode != 401 || resp.Header.Get("X-Should-Retry") != "false" || !strings.Contains(body, "invalid x-api-key") {
		t.Fatalf("answer %d (x-should-retry %q) %s: want upstream's 401, marked final", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
	resp = g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages/count_tokens", ph, `{}`)
	if readAll(t, resp); resp.StatusCode != 529 || resp.Header.Get("X-Should-Retry") != "" {
		t.Fatalf("answer %d (x-should-retry %q): other errors pass as they are", resp.StatusCode, resp.Header.Get("X-Should-Retry"))
	}
}

// TestGatewayStreamsEvents: the first server-sent event reaches the client
// while upstream is still answering, and the stream outlives the header
// timeout.
func TestGatewayStreamsEvents(t *testing.T) {
	t.Parallel()
	const headerTimeout = 50 * time.Millisecond
	g := newGatewayEnv(t, Config{HeaderTimeout: headerTimeout}, false, false)
	release := make(chan struct{})
	g.up.h = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message_start\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		time.Sleep(2 * headerTimeout) // longer than the header timeout, inside the stream
		_, _ = io.WriteString(w, "event: message_stop\ndata: {}\n\n")
	}
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	s := g.session(t, ant)
	resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages",
		map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}, `{"stream":true}`)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("answer %d %v", resp.StatusCode, resp.Header)
	}
	br := bufio.NewReader(resp.Body)
	firstLine := make(chan string, 1)
	go func() {
		l, _ := br.ReadString('\n')
		firstLine <- l
	}()
	select {
	case first := <-firstLine:
		if first != "event: message_start\n" {
			t.Fatalf("first line %q", first)
		}
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the first event did not come through before upstream finished its answer")
	}
	close(release) // upstream has not finished: the event came through on its own
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "event: message_stop") {
		t.Fatalf("rest of the stream %q, %v", rest, err)
	}
}

func TestGatewayHeaderTimeout(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{HeaderTimeout: 50 * time.Millisecond}, false, false)
	g.up.h = func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	s := g.session(t, ant)
	resp := g.send(t, "host-a", s.ID, http.MethodPost, "/anthropic_api_key/v1/messages",
		map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}, `{}`)
	if body := readAll(t, resp); resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "no answer in time") {
		t.Fatalf("answer %d %s, want 502 after the header timeout", resp.StatusCode, body)
	}
}

// TestGatewayVerifiesUpstreamTLS: an upstream whose certificate the
// transport does not trust is refused; trusted, it is used.
func TestGatewayVerifiesUpstreamTLS(t *testing.T) {
	t.Parallel()
	for _, trust := range []bool{false, true} {
		t.Run(fmt.Sprintf("trusted=%v", trust), func(t *testing.T) {
			t.Parallel()
			g := newGatewayEnv(t, Config{}, true, trust)
			ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
			s := g.session(t, ant)
			resp := g.send(t, "host-a", s.ID, http.MethodGet, "/anthropic_api_key/v1/models",
				map[string]string{"X-Api-Key": g.placeholder(t, s.ID, ant.Kind)}, "")
			body := readAll(t, resp)
			want := http.StatusBadGateway
			if trust {
				want = http.StatusOK
			}
			if resp.StatusCode != want || (!trust && !strings.Contains(body, "certificate")) {
				t.Fatalf("answer %d %s, want %d", resp.StatusCode, body, want)
			}
		})
	}
}

// TestGatewayProbeWithoutKey: a client probing the base URL itself (claude
// does after a failure) reaches it without any key.
func TestGatewayProbeWithoutKey(t *testing.T) {
	t.Parallel()
	g := newGatewayEnv(t, Config{}, false, false)
	ant := g.secret(t, apiv1.SecretAnthropicAPIKey, "ant", "sk-ant-REAL", g.upTS.URL)
	s := g.session(t, ant)
	resp := g.send(t, "host-a", s.ID, http.MethodHead, "/anthropic_api_key", nil, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("probe answered %d", resp.StatusCode)
	}
	reqs := g.up.got()
	if len(reqs) != 1 || reqs[0].Path != "/" || reqs[0].Header.Get("X-Api-Key") != "" || reqs[0].Header.Get("Authorization") != "" {
		t.Fatalf("upstream got %+v, want one keyless HEAD /", reqs)
	}
}

// TestGatewayPlaceholdersAgreeAcrossReplicas: replicas sharing a store
// (racing to create the key) compute the same placeholders; they differ
// per session and kind.
func TestGatewayPlaceholdersAgreeAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const replicas = 4
	got := make([]string, replicas)
	var wg sync.WaitGroup
	vault, err := secrets.New(secrets.Deps{Store: st, Sealer: coordinatortest.Sealer{}})
	if err != nil {
		t.Fatal(err)
	}
	replica := func(sealer secrets.Sealer) *Gateway {
		t.Helper()
		gw, err := New(Config{}, Deps{Store: st, Secrets: vault, Sealer: sealer})
		if err != nil {
			t.Fatal(err)
		}
		return gw
	}
	for i := range replicas {
		co := replica(coordinatortest.Sealer{})
		wg.Go(func() {
			ph, err := co.Placeholder(ctx, "s1", "anthropic_api_key")
			if err != nil {
				t.Error(err)
			}
			got[i] = ph
		})
	}
	wg.Wait()
	for i, ph := range got {
		if ph != got[0] || !strings.HasPrefix(ph, placeholderPrefix) || len(ph) != len(placeholderPrefix)+43 {
			t.Fatalf("replica %d placeholder %q, replica 0 %q", i, ph, got[0])
		}
	}
	co := replica(coordinatortest.Sealer{})
	again, _ := co.Placeholder(ctx, "s1", "anthropic_api_key")
	otherSession, _ := co.Placeholder(ctx, "s2", "anthropic_api_key")
	otherKind, _ := co.Placeholder(ctx, "s1", "openai_api_key")
	if again != got[0] || otherSession == again || otherKind == again {
		t.Fatalf("placeholders: restarted %q (want %q), other session %q, other kind %q", again, got[0], otherSession, otherKind)
	}
	noKey := replica(nil)
	if _, err := noKey.Placeholder(ctx, "s1", "anthropic_api_key"); err == nil {
		t.Fatal("a replica without a secrets key made a placeholder")
	}
	vs, err := vault.List(ctx, domain.FirstOrg)
	if err != nil || len(vs) != 0 {
		t.Fatalf("the gateway key is listed among secrets: %+v %v", vs, err)
	}
}
