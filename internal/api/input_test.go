package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	apidoc "github.com/engrams/engrams/api"
	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// apiRoutes reads every Route* constant of package apiv1 from its source,
// so a route added there is sent hostile input here without a list to
// keep.
func apiRoutes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../api/apiv1/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("find apiv1 sources: %v", err)
	}
	var routes []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, id := range vs.Names {
				if i >= len(vs.Values) {
					break
				}
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && strings.HasPrefix(id.Name, "Route") && lit.Kind == token.STRING {
					v, _ := strconv.Unquote(lit.Value)
					routes = append(routes, v)
				}
			}
			return false
		})
	}
	if !slices.Contains(routes, apiv1.RouteFileGet) || !slices.Contains(routes, apiv1.RouteTaskFiles) {
		t.Fatalf("parsed routes %v miss some the compiled package has", routes)
	}
	return routes
}

// nulBodies builds, from the OpenAPI document, a JSON body per operation
// ("post /v1/x") whose every top-level string property holds a NUL.
func nulBodies(t *testing.T) map[string]string {
	t.Helper()
	var doc struct {
		Paths      map[string]map[string]yaml.Node
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Type string
				}
			}
		}
	}
	if err := yaml.Unmarshal(apidoc.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for p, item := range doc.Paths {
		for method, node := range item {
			var op struct {
				RequestBody struct {
					Content map[string]struct {
						Schema struct {
							Ref string `yaml:"$ref"`
						}
					}
				} `yaml:"requestBody"`
			}
			if node.Decode(&op) != nil {
				continue
			}
			ref := op.RequestBody.Content["application/json"].Schema.Ref
			if ref == "" {
				continue
			}
			body := map[string]string{}
			for name, prop := range doc.Components.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")].Properties {
				if prop.Type == "string" {
					body[name] = "a\x00b"
				}
			}
			if len(body) > 0 {
				b, _ := json.Marshal(body)
				out[method+" "+p] = string(b)
			}
		}
	}
	if len(out) < 5 {
		t.Fatalf("found only %d request bodies with strings in openapi.yaml", len(out))
	}
	return out
}

// hostileCase is one request with hostile input.
type hostileCase struct {
	name, method, target, body string
	header                     http.Header
}

// long is 10 KB, far over any bound; a run of longer than maxEcho (64) of
// its byte in an answer means the answer repeated it unbounded.
var long = strings.Repeat("A", 10<<10)

var hostileValues = map[string]string{"long": long, "NUL": "x\x00y", "escape": "x\x1b]52;c;QQ==\x07", "not UTF-8": "x\xff\xfe"}

// hostileCases makes the cases of one route: each path value hostile in
// turn, each query parameter the API reads, each kind of bad body.
func hostileCases(pattern string, bodies map[string]string) []hostileCase {
	method, p, _ := strings.Cut(pattern, " ")
	target := func(bad, with string) string {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if strings.HasPrefix(s, "{") {
				v := "nope"
				if s == bad {
					v = with
				}
				segs[i] = url.PathEscape(v)
			}
		}
		return strings.Join(segs, "/")
	}
	var cases []hostileCase
	for _, seg := range strings.Split(p, "/") {
		if strings.HasPrefix(seg, "{") {
			for what, v := range hostileValues {
				cases = append(cases, hostileCase{name: seg + " " + what, method: method, target: target(seg, v)})
			}
		}
	}
	for _, q := range []string{"path", "mode", "state", "host", "wait", "follow", "after", "all", "version", "profile"} {
		for what, v := range hostileValues {
			cases = append(cases, hostileCase{name: "?" + q + " " + what, method: method, target: target("", "") + "?" + q + "=" + url.QueryEscape(v)})
		}
	}
	if strings.HasSuffix(p, "/events") {
		cases = append(cases, hostileCase{name: "Last-Event-ID long", method: method, target: target("", ""), header: http.Header{"Last-Event-Id": {long}}})
	}
	if method == http.MethodPost || method == http.MethodPut {
		for what, b := range map[string]string{
			"unknown long field": `{"` + long + `":1}`,
			"syntax error":       `{"a":` + long,
			"trailing data":      `{}` + long,
			"wrong type":         `{"name":[` + long + `]}`,
			"over 1 MiB":         `{"a":"` + strings.Repeat("A", 2<<20) + `"}`,
		} {
			cases = append(cases, hostileCase{name: "body " + what, method: method, target: target("", "") + "?path=/x", body: b})
		}
		if b, ok := bodies[strings.ToLower(method)+" "+p]; ok {
			cases = append(cases, hostileCase{name: "body NUL strings", method: method, target: target("", ""), body: b})
		}
	}
	return cases
}

// TestHostileInputEveryRoute sends hostile input to every route of the
// API (on SQLite, and on Postgres, which refuses NUL in text): each answers
// 4xx in the Error schema with a code, never repeating more than a bounded
// prefix of what it was sent.
func TestHostileInputEveryRoute(t *testing.T) {
	t.Parallel()
	routes, bodies := apiRoutes(t), nulBodies(t)
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			h := hostileAPI(t, backend)
			for _, pattern := range routes {
				for _, c := range hostileCases(pattern, bodies) {
					checkHostile(t, h, pattern, c)
				}
			}
		})
	}
}

func checkHostile(t *testing.T, h http.Handler, pattern string, c hostileCase) {
	t.Helper()
	req := httptest.NewRequest(c.method, "http://api"+c.target, strings.NewReader(c.body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	what := pattern + " " + c.name
	body := rec.Body.Bytes()
	var e apiv1.Error
	codes := []string{apiv1.CodeBadRequest, apiv1.CodeNotFound, apiv1.CodeMethodNotAllowed, apiv1.CodeConflict, apiv1.CodeTooLarge,
		apiv1.CodeUnauthorized} // a webhook delivery without its signature
	switch {
	case rec.Code < 400 || rec.Code >= 500:
		t.Errorf("%s: status %d, want 4xx: %.300s", what, rec.Code, body)
	case json.Unmarshal(body, &e) != nil || e.Error == "" || !slices.Contains(codes, e.Code):
		t.Errorf("%s: body is no Error with a client error's code: %.300s", what, body)
	case len(body) > 4<<10+256 || bytes.Contains(body, []byte(strings.Repeat("A", 65))):
		t.Errorf("%s: the answer repeats the input unbounded (%d bytes): %.300s", what, len(body), body)
	}
}

// hostileAPI is the API over the real services (no hosts) and a fresh
// database of backend.
func hostileAPI(t *testing.T, backend string) http.Handler {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	cfg := server.Config{ReplicaID: "r1"}
	switch backend {
	case "sqlite":
		cfg.Automations.SQLitePath = filepath.Join(t.TempDir(), "db")
		st, err = sqlite.Open(ctx, sqlite.Config{Path: cfg.Automations.SQLitePath}, sqlite.Deps{})
	default:
		cfg.Automations.PostgresURL = testutil.NewPostgresDB(t)
		st, err = postgres.Open(ctx, postgres.Config{URL: cfg.Automations.PostgresURL}, postgres.Deps{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	p, err := server.Assemble(cfg, server.Deps{Store: st, Secrets: sealer, Logger: log}, noHosts{}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Automations.Close() })
	ad := p.APIDeps(st, log)
	ad.Fleet, ad.Access, ad.TaskReads = taskStore{st}, taskStore{st}, taskStore{st}
	return api.New(api.Config{OpenAPI: apidoc.OpenAPI()}, ad)
}

// stalledBody fails as a body cut by the server's rate limit does.
type stalledBody struct{}

func (stalledBody) Read([]byte) (int, error) {
	return 0, fmt.Errorf("request body: fewer than 16384 bytes in 30s: %w", os.ErrDeadlineExceeded)
}

// TestStalledBody: a JSON body cut for coming too slowly is a 408, not a
// malformed body.
func TestStalledBody(t *testing.T) {
	t.Parallel()
	req := httptest.NewRequest(http.MethodPost, "/v1/sessions", stalledBody{})
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	api.New(api.Config{}, api.Deps{Fleet: fakeStore{}, Access: fakeStore{}}).ServeHTTP(rec, req)
	var e apiv1.Error
	if rec.Code != http.StatusRequestTimeout || json.Unmarshal(rec.Body.Bytes(), &e) != nil || e.Code != apiv1.CodeBadRequest ||
		!strings.Contains(e.Error, "too slowly") {
		t.Errorf("status %d body %s; want 408 bad_request", rec.Code, rec.Body)
	}
}
