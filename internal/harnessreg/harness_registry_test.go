package harnessreg

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/modeltest"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// agentEnv is a registry over SQLite and, with builder set, a harness
// builder over a local blob store.
type agentEnv struct {
	st     store.Store
	co     *Registry
	out    string // the builder's OutDir
	work   string // the registry's WorkDir
	blobs  string
	chunks *chunk.Store
}

func newAgentEnv(t *testing.T, builder bool) *agentEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e := &agentEnv{st: st}
	deps := Deps{Store: st}
	if builder {
		if _, err := exec.LookPath("mkfs.erofs"); err != nil {
			testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
		}
		e.out, e.blobs = t.TempDir(), t.TempDir()
		b, err := harness.New(harness.Config{OutDir: e.out, CacheDir: testNPMCache(t)}, harness.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		bs, err := localdir.New(localdir.Config{Dir: e.blobs}, localdir.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		if e.chunks, err = chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.chunks.Close)
		deps.Builder, deps.Chunks = b, e.chunks
	}
	e.work = t.TempDir()
	if e.co, err = New(Config{WorkDir: e.work}, deps); err != nil {
		t.Fatal(err)
	}
	return e
}

// testNPMCache keeps npm downloads across test runs ($ENGRAMS_TEST_CACHE,
// else ~/.cache/engrams-test).
func testNPMCache(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("ENGRAMS_TEST_CACHE"); d != "" {
		return filepath.Join(d, "harness")
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return t.TempDir()
	}
	return filepath.Join(d, "engrams-test", "harness")
}

// tarEntry is one entry of a test upload.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

// agentTree is a valid custom harness named name at version.
func agentTree(name, version string) []tarEntry {
	desc := `{"format":1,"name":"` + name + `","version":"` + version + `","entrypoint":["bin/agent"],"protocol":"shell",` +
		`"models":["m1","m2"],"modes":["auto"],"credentials":[],"hosts":[],"requires":{"libc":"none"}}`
	return []tarEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755},
		{name: "harness.json", body: desc, mode: 0o644},
		{name: "bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin/agent", body: "#!/bin/sh\necho " + version + "\n", mode: 0o755},
		{name: "bin/run", typ: tar.TypeSymlink, link: "agent", mode: 0o777},
	}
}

func makeTar(t testing.TB, entries []tarEntry, gz bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	var zw *gzip.Writer
	var w io.Writer = &buf
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1, 0), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

func TestBuildShellHarness(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, true)
	ctx := context.Background()
	// Trees a killed process left: the old one goes at the first build.
	old, young := filepath.Join(e.work, ".harness-old"), filepath.Join(e.work, ".harness-young")
	for _, d := range []string{old, young} {
		if err := os.MkdirAll(filepath.Join(d, "tree"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(old, time.Now().Add(-7*time.Hour), time.Now().Add(-7*time.Hour)); err != nil {
		t.Fatal(err)
	}
	v, err := e.co.BuildHarness(ctx, BuildHarnessRequest{Name: harness.BuiltinShell})
	if err != nil {
		t.Fatal(err)
	}
	h := v.Harness
	if h.Name != harness.BuiltinShell || h.Version != harness.ShellVersion || !h.Builtin || v.SizeBytes <= 0 ||
		v.Descriptor.Protocol != guestapi.HarnessProtocolShell || !strings.HasPrefix(h.Digest, "sha256:") {
		t.Fatalf("registered %+v (size %d, descriptor %+v)", h, v.SizeBytes, v.Descriptor)
	}
	// The bundle's chunks are in the blob store, and the bundle file is gone.
	m, err := chunk.Decode(h.Manifest)
	if err != nil || m.ChunkSize != chunk.DiskChunkSize || m.Size != v.SizeBytes {
		t.Fatalf("manifest %+v: %v", m, err)
	}
	if err := e.chunks.Verify(ctx, m); err != nil {
		t.Fatalf("bundle chunks: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(e.out, "*.erofs")); len(left) != 0 {
		t.Errorf("bundle files left behind: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(e.work, ".harness-*")); len(left) != 1 || left[0] != young {
		t.Errorf("work trees after a build: %v, want only the young one a killed process left", left)
	}
	live := map[string]bool{}
	if err := e.co.MarkLive(ctx, live); err != nil || len(live) == 0 {
		t.Errorf("live chunks of harnesses: %v %v", live, err)
	}
	// Again (rebuilt, same bytes) and by exact version (answered at once):
	// the same row.
	for _, req := range []BuildHarnessRequest{{Name: "shell"}, {Name: "shell", Version: "1"}, {Name: "shell", Version: "latest"}} {
		again, err := e.co.BuildHarness(ctx, req)
		if err != nil || again.Harness.ID != h.ID {
			t.Errorf("build %+v again: %+v %v, want harness %s", req, again.Harness, err, h.ID)
		}
	}
	got, err := e.co.Harness(ctx, "shell", "")
	if err != nil || got.Harness.ID != h.ID {
		t.Errorf("Harness(shell): %+v %v", got.Harness, err)
	}
	if _, err := e.co.Harness(ctx, "shell", "9"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Harness(shell@9): %v, want not found", err)
	}
	list, err := e.co.Harnesses(ctx)
	if err != nil || len(list) != 1 {
		t.Errorf("Harnesses: %+v %v", list, err)
	}
}

func TestBuildHarnessRefuses(t *testing.T) {
	t.Parallel()
	with := newAgentEnv(t, true)
	without := newAgentEnv(t, false)
	tests := []struct {
		name string
		env  *agentEnv
		req  BuildHarnessRequest
		want string
	}{
		{"unknown builtin", with, BuildHarnessRequest{Name: "aider"}, `"aider" is not a built-in harness: built in are claude-code, codex, shell`},
		{"bad version", with, BuildHarnessRequest{Name: "codex", Version: "1 2"}, `version "1 2": want an exact version`},
		{"libc on codex", with, BuildHarnessRequest{Name: "codex", Libc: "musl"}, "only claude-code has builds to choose from"},
		{"unknown libc", with, BuildHarnessRequest{Name: "claude-code", Libc: "uclibc"}, `libc "uclibc": want glibc or musl`},
		{"shell version", with, BuildHarnessRequest{Name: "shell", Version: "2"}, "shell has only version 1"},
		{"no blob store", without, BuildHarnessRequest{Name: "shell"}, "no blob store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := tt.env.co.BuildHarness(context.Background(), tt.req)
			if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want domain.ErrInvalid with %q", err, tt.want)
			}
		})
	}
}

func TestAddHarness(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, true)
	ctx := context.Background()
	add := func(entries []tarEntry, gz bool) (HarnessView, error) {
		return e.co.AddHarness(ctx, bytes.NewReader(makeTar(t, entries, gz)))
	}
	v, err := add(agentTree("my-agent", "1.0"), true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Harness.Builtin || v.Harness.Name != "my-agent" || v.Descriptor.Models[0] != "m1" {
		t.Fatalf("registered %+v", v)
	}
	if again, err := add(agentTree("my-agent", "1.0"), false); err != nil || again.Harness.ID != v.Harness.ID {
		t.Fatalf("the same tree again (plain tar): %+v %v", again.Harness, err)
	}
	changed := agentTree("my-agent", "1.0")
	changed[3].body += "# changed\n"
	if _, err := add(changed, true); !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "already registered with another bundle") {
		t.Fatalf("another bundle under my-agent@1.0: %v, want a conflict", err)
	}
	if _, err := e.co.BuildHarness(ctx, BuildHarnessRequest{Name: "my-agent"}); !errors.Is(err, domain.ErrInvalid) {
		t.Fatalf("building a custom harness's name: %v", err)
	}
	setuid := agentTree("suid-agent", "1")
	setuid[3].mode = 0o4755
	if v, err := add(setuid, true); err != nil || v.Harness.Name != "suid-agent" {
		t.Fatalf("setuid bit (dropped): %+v %v", v, err)
	}
}

func TestAddHarnessRefuses(t *testing.T) {
	t.Parallel()
	e := newAgentEnv(t, true)
	with := func(extra ...tarEntry) []tarEntry { return append(agentTree("ok-agent", "1"), extra...) }
	badDesc := agentTree("bad", "1")
	badDesc[1].body = `{"format":1,"name":"Bad Name","version":"1","entrypoint":["bin/agent"],"protocol":"telepathy","requires":{"libc":"none"}}`
	tests := []struct {
		name    string
		entries []tarEntry
		raw     []byte
		want    string
	}{
		{"traversal", with(tarEntry{name: "../escape", body: "x", mode: 0o644}), nil, `"../escape" has a '..' element`},
		{"inner traversal", with(tarEntry{name: "bin/../../x", body: "x", mode: 0o644}), nil, "'..' element"},
		{"absolute", with(tarEntry{name: "/etc/passwd", body: "x", mode: 0o644}), nil, "is an absolute path"},
		{"symlink out", with(tarEntry{name: "bin/out", typ: tar.TypeSymlink, link: "../../etc"}), nil, "outside the tree"},
		{"absolute symlink", with(tarEntry{name: "etc", typ: tar.TypeSymlink, link: "/etc"}), nil, `absolute path "/etc"`},
		{"chained symlinks out", with(tarEntry{name: "d/e/l", typ: tar.TypeSymlink, link: "../.."},
			tarEntry{name: "z", typ: tar.TypeSymlink, link: "d/e/l/../.."}), nil, `symlink z points to "d/e/l/../..", outside the tree`},
		{"symlink loop", with(tarEntry{name: "a", typ: tar.TypeSymlink, link: "b"}, tarEntry{name: "b", typ: tar.TypeSymlink, link: "a"}), nil, "symlink loop"},
		{"write through symlink", with(tarEntry{name: "bin/run/x", body: "x", mode: 0o644}), nil, "inside bin/run, which is a symlink"},
		{"under a file", with(tarEntry{name: "harness.json/x", body: "x", mode: 0o644}), nil, "which is a file"},
		{"hard link", with(tarEntry{name: "bin/hl", typ: tar.TypeLink, link: "bin/agent"}), nil, "is a hard link"},
		{"device", with(tarEntry{name: "dev", typ: tar.TypeChar}), nil, "is a character device"},
		{"fifo", with(tarEntry{name: "fifo", typ: tar.TypeFifo}), nil, "is a FIFO"},
		{"duplicate", with(tarEntry{name: "./bin/agent", body: "x", mode: 0o755}), nil, "bin/agent appears twice"},
		{"no descriptor", agentTree("x", "1")[2:], nil, "no harness.json at its root"},
		{"bad descriptor", badDesc, nil, `name "Bad Name"`},
		{"builtin name", agentTree("codex", "1"), nil, `"codex" is a built-in harness's name`},
		{"unreadable file", with(tarEntry{name: "secret", body: "x", mode: 0o600}), nil, "is not readable by all"},
		{"not a tar", nil, []byte("hello, this is not a tar archive, not at all, no........................................" +
			strings.Repeat(".", 600)), "not a valid tar"},
		{"bad gzip", nil, []byte{0x1f, 0x8b, 1, 2, 3}, "not a valid gzip stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			raw := tt.raw
			if raw == nil {
				raw = makeTar(t, tt.entries, true)
			}
			_, err := e.co.AddHarness(context.Background(), bytes.NewReader(raw))
			if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("%v, want domain.ErrInvalid with %q", err, tt.want)
			}
			if strings.Contains(err.Error(), os.TempDir()) {
				t.Errorf("the error names the server's temporary tree: %v", err)
			}
		})
	}
	if hs, _ := e.st.ListHarnesses(context.Background()); len(hs) != 0 {
		t.Errorf("refused uploads registered %+v", hs)
	}
}

// TestHarnessWorkDirIsPrivate: each work tree gets a fresh 0700 directory,
// in the configured work dir or else the system's temporary directory; a
// work dir other users could change is refused.
func TestHarnessWorkDirIsPrivate(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	open, sticky := filepath.Join(base, "open"), filepath.Join(base, "sticky")
	for d, mode := range map[string]os.FileMode{open: 0o777, sticky: 0o777 | os.ModeSticky} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct{ name, dir, want string }{
		{"configured, created", filepath.Join(base, "new", "trees"), ""},
		{"sticky like /tmp", sticky, ""},
		{"writable by others", open, "is writable by other users"},
		{"under a dir writable by others", filepath.Join(open, "trees"), open + " is writable by other users"},
		{"default", "", ""},
	}
	for _, tt := range tests {
		tmp, err := newHarnessRegistry(nil, nil, tt.dir).treeDir(time.Now())
		if tt.want != "" {
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: %v, want an error with %q", tt.name, err, tt.want)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		parent, prefix := tt.dir, treePrefix
		if parent == "" {
			parent, prefix = os.TempDir(), tmpTreePrefix
		}
		info, err := os.Lstat(tmp)
		if err != nil || !info.IsDir() || info.Mode().Perm() != 0o700 || filepath.Dir(tmp) != parent ||
			!strings.HasPrefix(filepath.Base(tmp), prefix) {
			t.Errorf("%s: work tree %s (%v, %v), want a fresh 0700 directory %s* in %s", tt.name, tmp, info.Mode(), err, prefix, parent)
		}
		removeTree(tmp)
	}
}

// TestCheckLinksInside resolves symlinks through each other as the kernel
// would.
func TestCheckLinksInside(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		links []treeLink
		want  string // "" accepted
	}{
		{"chain inside", []treeLink{{name: "bin/run", target: "agent"}, {name: "lib", target: "bin"},
			{name: ".x/y", target: "../lib/run"}, {name: "d/e/l", target: "../.."}, {name: "up", target: "d/e/l/bin/../lib"}}, ""},
		{"root itself", []treeLink{{name: "a/b/c", target: "../../."}}, ""},
		{"through a link to the root", []treeLink{{name: "d/e/l", target: "../.."}, {name: "z", target: "d/e/l/../.."}}, "symlink z points to"},
		{"through a link deeper down", []treeLink{{name: "a", target: "b/c"}, {name: "b/c", target: "../.."}}, "symlink a points to"},
		{"lexically out", []treeLink{{name: "a", target: "../x"}}, "outside the tree"},
		{"self", []treeLink{{name: "a", target: "a"}}, "symlink loop"},
	}
	for _, tt := range tests {
		err := checkLinksInside(tt.links)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case tt.want != "" && (!errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want domain.ErrInvalid with %q", tt.name, err, tt.want)
		}
	}
}

const codexTestVersion = modeltest.CodexVersion

// TestBuildCodexFromNPM builds the real codex harness from the npm
// registry (downloads cached across runs).
func TestBuildCodexFromNPM(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("downloads codex from npm")
	}
	e := newAgentEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	v, err := e.co.BuildHarness(ctx, BuildHarnessRequest{Name: harness.BuiltinCodex, Version: codexTestVersion})
	if errors.Is(err, harness.ErrRegistry) {
		testutil.SkipOrFail(t, "the npm registry is unreachable: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	d := v.Descriptor
	if v.Harness.Version != codexTestVersion || d.Protocol != guestapi.HarnessProtocolCodexJSON || len(d.Credentials) != 1 ||
		d.Credentials[0].Kind != "openai_api_key" || !v.Harness.Builtin {
		raw, _ := json.Marshal(d)
		t.Fatalf("codex: %+v %s", v.Harness, raw)
	}
	t.Logf("codex %s: %d MiB bundle in %v", codexTestVersion, v.SizeBytes>>20, time.Since(start).Round(time.Millisecond))
}
