package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// lockedBuffer collects logs written from several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type noHosts struct{}

func (noHosts) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, context.Canceled
}

// agentAPI is the API over a real coordinator and SQLite store, with a
// real secrets key and, when asked, a harness builder over a local blob
// store; both log into logs.
type agentAPI struct {
	h    http.Handler
	p    *server.Parts
	st   store.Store
	db   string // the SQLite file
	logs *lockedBuffer
}

type agentOpts struct {
	builder      bool
	registry     string // npm registry of the builder
	maxFileBytes int64
	automations  bool         // run automations on the test's database
	audit        api.AuditLog // keeps the audit log (default: nowhere)
}

func newAgentAPI(t *testing.T, o agentOpts) *agentAPI {
	t.Helper()
	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "db")
	st, err := sqlite.Open(ctx, sqlite.Config{Path: dbPath}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	deps := server.Deps{Store: st, Secrets: sealer, Logger: log}
	if o.builder {
		if _, err := exec.LookPath("mkfs.erofs"); err != nil {
			testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
		}
		b, err := harness.New(harness.Config{OutDir: t.TempDir(), CacheDir: t.TempDir(), Registry: o.registry}, harness.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := localdir.New(localdir.Config{Dir: t.TempDir()}, localdir.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cs.Close)
		deps.HarnessBuilder, deps.HarnessChunks = b, cs
	}
	cfg := server.Config{ReplicaID: "r1", Harnesses: harnessreg.Config{WorkDir: t.TempDir()}}
	if o.automations {
		cfg.Automations.SQLitePath = dbPath
	}
	p, err := server.Assemble(cfg, deps, noHosts{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if p.Automations != nil {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- p.Automations.Run(runCtx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("automations: %v", err)
			}
		})
	}
	ad := p.APIDeps(st, log)
	ad.Fleet, ad.Access = fakeStore{}, fakeStore{}
	if o.audit != nil {
		ad.Access = auditTo{log: o.audit}
	}
	h := api.New(api.Config{MaxFileBytes: o.maxFileBytes}, ad)
	return &agentAPI{h: h, p: p, st: st, db: dbPath, logs: logs}
}

func (a *agentAPI) do(method, target, contentType string, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, body)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	rec := httptest.NewRecorder()
	a.h.ServeHTTP(rec, req)
	return rec
}

// check asserts an answer's status and what its body holds and lacks.
func check(t *testing.T, what string, rec *httptest.ResponseRecorder, status int, contains, lacks []string) {
	t.Helper()
	body := rec.Body.String()
	if rec.Code != status {
		t.Errorf("%s: status %d, want %d: %s", what, rec.Code, status, body)
	}
	for _, s := range contains {
		if !strings.Contains(body, s) {
			t.Errorf("%s: body lacks %s: %s", what, s, body)
		}
	}
	for _, s := range lacks {
		if strings.Contains(body, s) {
			t.Errorf("%s: body has %s: %s", what, s, body)
		}
	}
}

// harnessTarGz is a custom harness tree (plus extra entries, each with
// hdr.Size random bytes) as a tar.gz.
func harnessTarGz(t *testing.T, name string, extra ...*tar.Header) []byte {
	t.Helper()
	desc := `{"format":1,"name":"` + name + `","version":"1.0","entrypoint":["agent"],"protocol":"shell","models":["m"],"modes":[],` +
		`"credentials":[{"kind":"openai_api_key","env":"OPENAI_API_KEY"}],"hosts":["api.openai.com:443"],"requires":{"libc":"none"}}`
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name, body string
		mode       int64
	}{{"harness.json", desc, 0o644}, {"agent", "#!/bin/sh\n", 0o755}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range extra {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.CopyN(tw, rand.Reader, h.Size); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestHarnessRoutes(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{builder: true, maxFileBytes: 64 << 10})
	json := func(s string) io.Reader { return strings.NewReader(s) }
	steps := []struct {
		what, method, target, ct string
		body                     io.Reader
		status                   int
		contains, lacks          []string
	}{
		{"build shell", "POST", "/v1/harnesses/build", "application/json", json(`{"name":"shell"}`), 200,
			[]string{`"name":"shell"`, `"version":"1"`, `"protocol":"shell"`, `"builtin":true`, `"models":[]`, `"credentials":[]`,
				`"requires":{"libc":"none"}`, `"entrypoint":["bin/engrams-shell-harness"]`, `"digest":"sha256:`}, []string{`"size_bytes":0`}},
		{"build again", "POST", "/v1/harnesses/build", "", json(`{"name":"shell","version":"1"}`), 200, []string{`"name":"shell"`}, nil},
		{"unknown builtin", "POST", "/v1/harnesses/build", "", json(`{"name":"aider"}`), 400,
			[]string{`"code":"bad_request"`, "built in are claude-code, codex, shell"}, nil},
		{"unknown field", "POST", "/v1/harnesses/build", "", json(`{"name":"shell","tag":"x"}`), 400, []string{`unknown field \"tag\"`}, nil},
		{"add", "POST", "/v1/harnesses", "application/gzip", bytes.NewReader(harnessTarGz(t, "my-agent")), 200,
			[]string{`"name":"my-agent"`, `"builtin":false`, `"credentials":[{"kind":"openai_api_key","env":"OPENAI_API_KEY"}]`, `"hosts":["api.openai.com:443"]`}, nil},
		{"add json", "POST", "/v1/harnesses", "application/json", json(`{"name":"shell"}`), 400, []string{"send a tar (or tar.gz)", "POST /v1/harnesses/build"}, nil},
		{"add traversal", "POST", "/v1/harnesses", "", bytes.NewReader(harnessTarGz(t, "evil", &tar.Header{Name: "../x", Typeflag: tar.TypeDir, Mode: 0o755})), 400,
			[]string{`has a '..' element`}, nil},
		{"add too big", "POST", "/v1/harnesses", "", bytes.NewReader(harnessTarGz(t, "big", &tar.Header{Name: "blob", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 20})), 413,
			[]string{`"code":"too_large"`}, nil},
		{"list", "GET", "/v1/harnesses", "", nil, 200, []string{`"items":[{`, `"name":"my-agent"`, `"name":"shell"`}, []string{`"name":"evil"`}},
		{"get", "GET", "/v1/harnesses/my-agent", "", nil, 200, []string{`"version":"1.0"`}, nil},
		{"get version", "GET", "/v1/harnesses/shell?version=1", "", nil, 200, []string{`"name":"shell"`}, nil},
		{"get unknown version", "GET", "/v1/harnesses/shell?version=2", "", nil, 404, []string{"harness shell@2: not found"}, nil},
		{"get unknown", "GET", "/v1/harnesses/nope", "", nil, 404, []string{`"code":"not_found"`}, nil},
	}
	for _, s := range steps {
		check(t, s.what, a.do(s.method, s.target, s.ct, s.body), s.status, s.contains, s.lacks)
	}
}

func TestHarnessBuildFailures(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	noRegistry := newAgentAPI(t, agentOpts{builder: true, registry: dead})
	check(t, "registry unreachable", noRegistry.do("POST", "/v1/harnesses/build", "", strings.NewReader(`{"name":"codex","version":"1.0.0"}`)),
		503, []string{`"code":"unavailable"`, "npm registry unavailable"}, nil)
	noBlobs := newAgentAPI(t, agentOpts{})
	check(t, "no blob store", noBlobs.do("POST", "/v1/harnesses/build", "", strings.NewReader(`{"name":"shell"}`)),
		400, []string{"no blob store"}, nil)
	check(t, "no blob store (add)", noBlobs.do("POST", "/v1/harnesses", "", bytes.NewReader(harnessTarGz(t, "x"))),
		400, []string{"no blob store"}, nil)
}

// TestDeleteHarness: a deleted harness is no longer listed or found by
// name; deleting it again is 404.
func TestDeleteHarness(t *testing.T) {
	t.Parallel()
	a := newAgentAPI(t, agentOpts{})
	seedProfiles(t, a)
	check(t, "delete", a.do("DELETE", "/v1/harnesses/claude-code?version=2.1.0", "", nil), 200,
		[]string{`"name":"claude-code"`, `"version":"2.1.0"`, `"deleted_at":"`}, nil)
	check(t, "get after", a.do("GET", "/v1/harnesses/claude-code", "", nil), 404, nil, nil)
	check(t, "list after", a.do("GET", "/v1/harnesses", "", nil), 200, []string{`"items":[]`}, nil)
	check(t, "delete again", a.do("DELETE", "/v1/harnesses/claude-code", "", nil), 404, nil, nil)
}
