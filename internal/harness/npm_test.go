package harness

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

// tarEntry is one entry of a fake npm tarball; names get "package/".
type tarEntry struct {
	name, body, link string
	typ              byte  // default tar.TypeReg
	mode             int64 // default 0644
}

func makeTarball(t *testing.T, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body)), Linkname: e.link}
		if !strings.HasPrefix(h.Name, "package/") && !strings.HasPrefix(h.Name, "../") {
			h.Name = "package/" + h.Name
		}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		must(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			must(t, err)
		}
	}
	must(t, tw.Close())
	must(t, zw.Close())
	return buf.Bytes()
}

// fakeRegistry serves package metadata and tarballs on 127.0.0.1 as the
// npm registry does.
type fakeRegistry struct {
	srv      *httptest.Server
	mu       sync.Mutex
	docs     map[string][]byte // "name@version" → version metadata
	tarballs map[string][]byte // URL path → bytes
	tags     map[string]string // name → latest
	requests atomic.Int64
}

func newFakeRegistry(t *testing.T) *fakeRegistry {
	t.Helper()
	r := &fakeRegistry{docs: map[string][]byte{}, tarballs: map[string][]byte{}, tags: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *fakeRegistry) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if tgz, ok := r.tarballs[req.URL.Path]; ok {
		_, _ = w.Write(tgz)
		return
	}
	parts := strings.Split(strings.TrimPrefix(req.URL.EscapedPath(), "/"), "/")
	if len(parts) != 2 {
		http.NotFound(w, req)
		return
	}
	name, _ := url.PathUnescape(parts[0])
	version, _ := url.PathUnescape(parts[1])
	if v, ok := r.tags[name]; ok && version == "latest" {
		version = v
	}
	doc, ok := r.docs[name+"@"+version]
	if !ok {
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(doc)
}

// add publishes name@version with the tarball of entries and the extra
// metadata fields; served is what the tarball URL answers (default the
// tarball itself).
func (r *fakeRegistry) add(t *testing.T, name, version string, meta map[string]any, entries []tarEntry, served []byte) {
	t.Helper()
	tgz := makeTarball(t, entries)
	sum := sha512.Sum512(tgz)
	tpath := "/tarballs/" + cacheKey(name, version) + ".tgz"
	doc := map[string]any{"name": name, "version": version, "dist": map[string]any{
		"tarball": r.srv.URL + tpath, "integrity": "sha512-" + base64.StdEncoding.EncodeToString(sum[:]),
	}}
	for k, v := range meta {
		doc[k] = v
	}
	data, err := json.Marshal(doc)
	must(t, err)
	if served == nil {
		served = tgz
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.docs[name+"@"+version] = data
	r.tarballs[tpath] = served
	if cur, ok := r.tags[name]; !ok || guestapi.CompareVersions(version, cur) > 0 {
		r.tags[name] = version
	}
}

// script is a fake program printing line and its arguments.
func script(line string) string { return "#!/bin/sh\necho \"" + line + "\" \"$@\"\n" }

// publishFakes publishes claude-code (native 9.0.0, cli.js 1.0.0 and
// 2.0.0 needing Node.js 99), Node.js and codex (a platform alias 1.0.0 and
// an older all-platform 0.1.0).
func publishFakes(t *testing.T, r *fakeRegistry) {
	t.Helper()
	r.add(t, ClaudePackage, "9.0.0", map[string]any{
		"bin": map[string]string{"claude": "bin/claude.exe"}, "engines": map[string]string{"node": ">=22.0.0"},
		"optionalDependencies": map[string]string{ClaudeNativePackage: "9.0.0", ClaudeNativePackage + "-musl": "9.0.0"},
	}, []tarEntry{{name: "bin/claude.exe", body: "stub"}, {name: "package.json", body: "{}"}}, nil)
	for _, libc := range []string{"", "-musl"} {
		r.add(t, ClaudeNativePackage+libc, "9.0.0", nil, []tarEntry{
			{name: "claude", body: script("9.0.0 (Claude Code)" + libc), mode: 0o755},
			{name: "LICENSE.md", body: "license"},
		}, nil)
	}
	legacy := []tarEntry{
		{name: "cli.js", body: "console.log('1.0.0')"},
		{name: "vendor/ripgrep/x64-linux/rg", body: "rg", mode: 0o755},
		{name: "vendor/ripgrep/arm64-darwin/rg", body: "rg", mode: 0o755},
		{name: "vendor/ripgrep/x64-win32/rg.exe", body: "rg"},
	}
	r.add(t, ClaudePackage, "1.0.0", map[string]any{
		"bin": map[string]string{"claude": "cli.js"}, "engines": map[string]string{"node": ">=18.0.0"},
	}, legacy, nil)
	r.add(t, ClaudePackage, "2.0.0", map[string]any{
		"bin": map[string]string{"claude": "cli.js"}, "engines": map[string]string{"node": ">=99"},
	}, legacy, nil)
	r.add(t, NodePackage, DefaultNodeVersion, nil, []tarEntry{
		{name: "bin/node", body: script("node"), mode: 0o755},
		{name: "LICENSE", body: "node license"},
		{name: "include/node/node.h", body: "h"},
	}, nil)
	r.add(t, CodexPackage, "1.0.0", map[string]any{
		"optionalDependencies": map[string]string{CodexPlatformDep: "npm:@openai/codex@1.0.0-linux-x64"},
	}, []tarEntry{{name: "bin/codex.js", body: "js"}}, nil)
	r.add(t, CodexPackage, "1.0.0-linux-x64", nil, []tarEntry{
		{name: "vendor/x86_64-unknown-linux-musl/codex-package.json", body: `{"entrypoint":"bin/codex"}`},
		{name: "vendor/x86_64-unknown-linux-musl/bin/codex", body: script("codex-cli 1.0.0"), mode: 0o755},
		{name: "vendor/x86_64-unknown-linux-musl/codex-path/rg", body: "rg", mode: 0o755},
		{name: "vendor/x86_64-unknown-linux-musl/codex-resources/voice/lib/libglib.so", body: "so"},
		{name: "vendor/aarch64-unknown-linux-musl/bin/codex", body: "arm", mode: 0o755},
	}, nil)
	r.add(t, CodexPackage, "0.1.0", nil, []tarEntry{
		{name: "bin/codex.js", body: "js"},
		{name: "vendor/x86_64-unknown-linux-musl/codex/codex", body: script("codex-cli 0.1.0"), mode: 0o755},
	}, nil)
}

// newFakeBuilder is a Builder using r, with its own cache.
func newFakeBuilder(t *testing.T, r *fakeRegistry, cache string) *Builder {
	t.Helper()
	if cache == "" {
		cache = t.TempDir()
	}
	return newTestBuilder(t, Config{CacheDir: cache, Registry: r.srv.URL})
}

func TestStageBuiltinFromRegistry(t *testing.T) {
	t.Parallel()
	r := newFakeRegistry(t)
	publishFakes(t, r)
	tests := []struct {
		name      string
		spec      BuiltinSpec
		entry     []string
		version   string // of the descriptor
		output    string // of running the entrypoint
		present   []string
		absent    []string
		wantError error
	}{
		{name: "claude native latest", spec: BuiltinSpec{Name: BuiltinClaudeCode}, version: "9.0.0",
			entry: []string{"bin/claude"}, output: "9.0.0 (Claude Code)", present: []string{"lib/claude-code/LICENSE.md"}},
		{name: "claude native musl", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "9.0.0", Libc: guestapi.LibcMusl}, version: "9.0.0",
			entry: []string{"bin/claude"}, output: "9.0.0 (Claude Code)-musl"},
		{name: "claude on node", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "1.0.0"}, version: "1.0.0",
			entry: []string{"bin/node", "lib/claude-code/cli.js"}, output: "node " + filepath.Join("STAGE", "lib/claude-code/cli.js"),
			present: []string{"lib/claude-code/vendor/ripgrep/x64-linux/rg", "lib/node/LICENSE"},
			absent:  []string{"lib/claude-code/vendor/ripgrep/arm64-darwin", "lib/claude-code/vendor/ripgrep/x64-win32", "include", "lib/node/include"}},
		{name: "claude on node, musl", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "1.0.0", Libc: guestapi.LibcMusl}, wantError: ErrUnsupportedPackage},
		{name: "claude needs newer node", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "2.0.0"}, wantError: ErrUnsupportedPackage},
		{name: "claude version unknown", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "8.8.8"}, wantError: ErrNotFound},
		{name: "claude version range", spec: BuiltinSpec{Name: BuiltinClaudeCode, Version: "^9.0.0"}, wantError: ErrNotFound},
		{name: "codex platform package", spec: BuiltinSpec{Name: BuiltinCodex, Version: "1.0.0"}, version: "1.0.0",
			entry: []string{"lib/codex/bin/codex"}, output: "codex-cli 1.0.0",
			present: []string{"lib/codex/codex-path/rg", "lib/codex/codex-package.json"},
			absent:  []string{"lib/codex/codex-resources/voice", "vendor"}},
		{name: "codex all platforms", spec: BuiltinSpec{Name: BuiltinCodex, Version: "0.1.0"}, version: "0.1.0",
			entry: []string{"lib/codex/codex/codex"}, output: "codex-cli 0.1.0"},
		{name: "codex libc", spec: BuiltinSpec{Name: BuiltinCodex, Libc: guestapi.LibcMusl}, wantError: ErrUnknownBuiltin},
		{name: "unknown", spec: BuiltinSpec{Name: "aider"}, wantError: ErrUnknownBuiltin},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newFakeBuilder(t, r, "")
			stage := filepath.Join(t.TempDir(), "stage")
			d, err := b.StageBuiltin(context.Background(), tc.spec, stage)
			if tc.wantError != nil {
				if !errors.Is(err, tc.wantError) {
					t.Fatalf("StageBuiltin = %v, want %v", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("StageBuiltin: %v", err)
			}
			if d.Name != tc.spec.Name || d.Version != tc.version || !reflect.DeepEqual(d.Entrypoint, tc.entry) {
				t.Fatalf("descriptor %+v, want %s@%s with entrypoint %q", d, tc.spec.Name, tc.version, tc.entry)
			}
			if d.Requires.Libc != guestapi.LibcNone { // the fakes are scripts
				t.Fatalf("requires %+v of scripts", d.Requires)
			}
			out, err := exec.Command(d.Argv(stage)[0], d.Argv(stage)[1:]...).CombinedOutput()
			if want := strings.ReplaceAll(tc.output, "STAGE", stage); err != nil || strings.TrimSpace(string(out)) != want {
				t.Fatalf("entrypoint printed %q (%v), want %q", out, err, want)
			}
			for _, p := range tc.present {
				if _, err := os.Stat(filepath.Join(stage, p)); err != nil {
					t.Errorf("%s missing: %v", p, err)
				}
			}
			for _, p := range tc.absent {
				if _, err := os.Lstat(filepath.Join(stage, p)); err == nil {
					t.Errorf("%s staged, want it left out", p)
				}
			}
			if _, err := b.Build(context.Background(), BuildSpec{Dir: stage}); err != nil {
				t.Fatalf("Build the staged tree: %v", err)
			}
		})
	}
}

func TestFetchUsesTheCache(t *testing.T) {
	t.Parallel()
	r := newFakeRegistry(t)
	publishFakes(t, r)
	cache := t.TempDir()
	b := newFakeBuilder(t, r, cache)
	ctx := context.Background()
	spec := BuiltinSpec{Name: BuiltinClaudeCode, Version: "9.0.0"}
	first, err := b.BuildBuiltin(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.requests.Load(); n != 3 { // main metadata, platform metadata, tarball
		t.Fatalf("first build made %d requests, want 3", n)
	}
	r.srv.Close() // from now on the registry is unreachable
	again, err := b.BuildBuiltin(ctx, spec)
	if err != nil || again.Digest != first.Digest {
		t.Fatalf("cached build: %v, digest %s, want %s", err, again.Digest, first.Digest)
	}
	if _, err := b.BuildBuiltin(ctx, BuiltinSpec{Name: BuiltinClaudeCode}); !errors.Is(err, ErrRegistry) {
		t.Fatalf("latest with the registry down: %v, want ErrRegistry", err)
	}
	// A corrupted cached tarball is fetched again, which fails here.
	tgz := filepath.Join(cache, "npm", cacheKey(ClaudeNativePackage, "9.0.0")+".tgz")
	must(t, os.WriteFile(tgz, []byte("corrupt"), 0o644))
	if _, err := b.BuildBuiltin(ctx, spec); !errors.Is(err, ErrRegistry) {
		t.Fatalf("corrupt cache with the registry down: %v, want ErrRegistry", err)
	}
}

func TestFetchVerifiesIntegrity(t *testing.T) {
	t.Parallel()
	r := newFakeRegistry(t)
	evil := makeTarball(t, []tarEntry{{name: "claude", body: script("evil"), mode: 0o755}})
	r.add(t, ClaudePackage, "9.0.0", map[string]any{
		"bin": map[string]string{"claude": "bin/claude.exe"}, "optionalDependencies": map[string]string{ClaudeNativePackage: "9.0.0"},
	}, nil, nil)
	r.add(t, ClaudeNativePackage, "9.0.0", nil, []tarEntry{{name: "claude", body: script("good"), mode: 0o755}}, evil)
	cache := t.TempDir()
	b := newFakeBuilder(t, r, cache)
	_, err := b.StageBuiltin(context.Background(), BuiltinSpec{Name: BuiltinClaudeCode, Version: "9.0.0"}, t.TempDir())
	if !errors.Is(err, ErrIntegrity) {
		t.Fatalf("StageBuiltin = %v, want ErrIntegrity", err)
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "npm", "*.tgz")); len(m) != 0 {
		t.Fatalf("a tarball failing its integrity was cached: %v", m)
	}
}

func TestExtractTarballRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entries []tarEntry
	}{
		{"dotdot", []tarEntry{{name: "package/../../evil", body: "x"}}},
		{"hard link", []tarEntry{{name: "a", body: "x"}, {name: "b", typ: tar.TypeLink, link: "package/a"}}},
		{"device", []tarEntry{{name: "dev", typ: tar.TypeChar}}},
		{"fifo", []tarEntry{{name: "fifo", typ: tar.TypeFifo}}},
		{"through absolute symlink", []tarEntry{{name: "lnk", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "lnk/evil", body: "x"}}},
		{"through parent symlink", []tarEntry{{name: "up", typ: tar.TypeSymlink, link: "../.."}, {name: "up/evil", body: "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			must(t, os.Mkdir(outside, 0o755))
			for i := range tc.entries {
				tc.entries[i].link = strings.ReplaceAll(tc.entries[i].link, "OUTSIDE", outside)
			}
			tgz := filepath.Join(base, "p.tgz")
			must(t, os.WriteFile(tgz, makeTarball(t, tc.entries), 0o644))
			dest := filepath.Join(base, "a", "b", "dest")
			err := extractTarball(tgz, dest, func(rel string) (string, bool) { return rel, true })
			if err == nil {
				t.Fatal("extractTarball succeeded")
			}
			t.Logf("refused: %v", err)
			for _, p := range []string{filepath.Join(outside, "evil"), filepath.Join(base, "evil"), filepath.Join(base, "a", "evil")} {
				if _, serr := os.Lstat(p); serr == nil {
					t.Fatalf("%s was written (error %v)", p, err)
				}
			}
		})
	}
}
