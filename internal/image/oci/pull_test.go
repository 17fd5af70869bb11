package oci

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/compression"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// multiLayer is three layers exercising whiteouts, an opaque directory (its marker
// after an entry of its own layer), replacements of every kind, hard links, special
// mode bits, owners, mtimes and implicit directories.
func multiLayer(t *testing.T) []v1.Layer {
	t1 := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	keep := func(body string, mode int64) ent {
		e := file("etc/keep", body, mode)
		e.uid, e.gid, e.mtime = 1000, 1000, t1
		return e
	}
	l1 := layer(t,
		dir("bin/", 0o755), file("bin/sh", "#!shell", 0o755),
		dir("etc/", 0o755), keep("keep-v1", 0o644), file("etc/gone", "gone", 0o644),
		file("etc/conf.d", "was-a-file", 0o644),
		dir("opt/", 0o755), dir("opt/old/", 0o750), file("opt/old/x", "x", 0o600),
		dir("var/", 0o755), dir("var/cache/", 0o755), file("var/cache/a", "a", 0o644),
		dir("var/cache/sub/", 0o755), file("var/cache/sub/b", "b", 0o644),
		dir("usr/", 0o755), dir("usr/lib/", 0o755), file("usr/lib/libfoo.so.1", "elf", 0o644),
		symlink("usr/lib/libfoo.so", "libfoo.so.1"), symlink("usr/lib/libbar.so", "libfoo.so.1"),
		dir("usr/bin/", 0o755), file("usr/bin/su", "su", 0o4755), hardlink("usr/bin/su2", "usr/bin/su"),
		dir("tmp/", 0o1777),
		dir("data/", 0o755), file("data/big", "big-v1", 0o644), hardlink("data/hl", "data/big"),
		dir("srv/", 0o755), dir("srv/site/", 0o755), file("srv/site/index", "html", 0o644),
		file("implicit/deep/f", "deep", 0o644),
	)
	l2 := layer(t,
		file("var/cache/new", "new", 0o644),
		file("var/cache/sub/c", "c", 0o644),
		whiteout("var/cache/.wh..wh..opq"),
		whiteout("etc/.wh.gone"),
		keep("keep-v2", 0o640),
		whiteout("opt/.wh.old"),
		file("etc/added", "added", 0o644),
		file("etc/both", "both", 0o644), whiteout("etc/.wh.both"),
		whiteout("etc/.wh.never-existed"),
		whiteout("etc/.wh..wh.plnk"),
	)
	l3 := layer(t,
		file("data/big", "big-v3", 0o644),
		dir("opt/old/", 0o755), file("opt/old/y", "y", 0o644),
		file("usr/lib/libfoo.so", "now-a-file", 0o644),
		file("srv/site", "flat", 0o644),
		dir("etc/conf.d/", 0o755), file("etc/conf.d/x", "x", 0o644),
	)
	return []v1.Layer{l1, l2, l3}
}

// multiLayerTree is the exact tree multiLayer flattens to; @ is t0, @1 is t1.
var multiLayerTree = []string{
	". d 0755 0:0 0",
	"bin d 0755 0:0 @", "bin/sh f 0755 0:0 @ #!shell",
	"data d 0755 0:0 @", "data/big f 0644 0:0 @ big-v3", "data/hl f 0644 0:0 @ big-v1",
	"etc d 0755 0:0 @", "etc/added f 0644 0:0 @ added", "etc/both f 0644 0:0 @ both",
	"etc/conf.d d 0755 0:0 @", "etc/conf.d/x f 0644 0:0 @ x",
	"etc/keep f 0640 1000:1000 @1 keep-v2",
	"implicit d 0755 0:0 0", "implicit/deep d 0755 0:0 0", "implicit/deep/f f 0644 0:0 @ deep",
	"opt d 0755 0:0 @", "opt/old d 0755 0:0 @", "opt/old/y f 0644 0:0 @ y",
	"srv d 0755 0:0 @", "srv/site f 0644 0:0 @ flat",
	"tmp d 1777 0:0 @",
	"usr d 0755 0:0 @", "usr/bin d 0755 0:0 @", "usr/bin/su f 4755 0:0 @ su", "usr/bin/su2 f 4755 0:0 @ su",
	"usr/lib d 0755 0:0 @", "usr/lib/libbar.so l 0777 0:0 @ -> libfoo.so.1",
	"usr/lib/libfoo.so f 0644 0:0 @ now-a-file", "usr/lib/libfoo.so.1 f 0644 0:0 @ elf",
	"var d 0755 0:0 @", "var/cache d 0755 0:0 @", "var/cache/new f 0644 0:0 @ new",
	"var/cache/sub d 0755 0:0 @", "var/cache/sub/c f 0644 0:0 @ c",
}

func wantTree(lines []string) []string {
	t1 := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	out := make([]string, len(lines))
	for i, l := range lines {
		l = strings.Replace(l, " @1", " "+strconv.FormatInt(t1.Unix(), 10), 1)
		out[i] = strings.Replace(l, " @", " "+strconv.FormatInt(t0.Unix(), 10), 1)
	}
	out = ownerOK(out)
	slices.Sort(out)
	return out
}

func diffLines(t *testing.T, got, want []string) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("unexpected: %s", g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("missing:    %s", w)
		}
	}
}

func TestPullFlattensLayersExactly(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	cfg := v1.Config{
		Env: []string{"PATH=/usr/bin:/bin", "A=1"}, WorkingDir: "/srv",
		Entrypoint: []string{"/bin/sh", "-c"}, Cmd: []string{"echo hi"}, User: "1000:1000",
	}
	src := image(t, "amd64", cfg, multiLayer(t)...)
	ref, digest := push(t, host, "multi:v1", src)

	img, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	diffLines(t, listTree(t, target), wantTree(multiLayerTree))
	if img.Digest != digest || img.IndexDigest != "" || img.Repository != host+"/multi" {
		t.Errorf("digest %s index %q repo %s, want %s, \"\", %s/multi", img.Digest, img.IndexDigest, img.Repository, digest, host)
	}
	want := ImageConfig{Env: cfg.Env, WorkingDir: cfg.WorkingDir, Entrypoint: cfg.Entrypoint, Cmd: cfg.Cmd, User: cfg.User}
	if !reflect.DeepEqual(img.Config, want) {
		t.Errorf("config %+v, want %+v", img.Config, want)
	}
	if !img.HasShell || img.RequireShell() != nil || len(img.Layers) != 3 || img.Dir != target {
		t.Errorf("has shell %v, layers %d, dir %s", img.HasShell, len(img.Layers), img.Dir)
	}
	sameFile(t, filepath.Join(target, "usr/bin/su"), filepath.Join(target, "usr/bin/su2"), true)
	sameFile(t, filepath.Join(target, "data/big"), filepath.Join(target, "data/hl"), false)
}

func sameFile(t *testing.T, a, b string, want bool) {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(fa, fb) != want {
		t.Errorf("%s and %s: same inode %v, want %v", a, b, !want, want)
	}
}

// The same image gives the same tree, implicit directories included.
func TestPullIsDeterministic(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	ref, _ := push(t, host, "multi:v1", image(t, "amd64", v1.Config{}, multiLayer(t)...))
	p := newPuller()
	_, err, a, _ := pullTo(t, p, ref, Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	_, err, b, _ := pullTo(t, p, ref, Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	diffLines(t, listTree(t, b), listTree(t, a))
}

// Gzip, zstd and uncompressed layers all apply.
func TestPullLayerCompressions(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	raw := tarBytes(t, file("plain", "plain", 0o644))
	plain := static.NewLayer(raw, types.OCIUncompressedLayer)
	zb := tarBytes(t, file("zstd", "zstd", 0o644))
	zl, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader(string(zb))), nil
	}, tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := push(t, host, "formats:v1", image(t, "amd64", v1.Config{}, layer(t, file("gzip", "gzip", 0o644)), zl, plain))
	_, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	for _, n := range []string{"gzip", "zstd", "plain"} {
		if b, err := os.ReadFile(filepath.Join(target, n)); err != nil || string(b) != n {
			t.Errorf("%s: %q, %v", n, b, err)
		}
	}
}

type call struct {
	stage       string
	done, total int64
}

// Progress goes resolve → pull (growing to the total, about once per MiB) → finish.
func TestPullReportsProgress(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	big := make([]byte, 3<<20+123) // incompressible: ~3 MiB on the wire
	if _, err := rand.Read(big); err != nil {
		t.Fatal(err)
	}
	ref, _ := push(t, host, "big:v1", image(t, "amd64", v1.Config{},
		layer(t, file("bin/sh", "sh", 0o755)), layer(t, file("big", string(big), 0o644))))
	var calls []call
	target := filepath.Join(t.TempDir(), "rootfs")
	img, err := newPuller().Pull(context.Background(), Request{Ref: ref, Target: target,
		Progress: func(s string, d, n int64) { calls = append(calls, call{s, d, n}) }})
	if err != nil {
		t.Fatal(err)
	}
	total := img.CompressedBytes()
	if total < 3<<20 {
		t.Fatalf("compressed bytes %d, want > 3 MiB", total)
	}
	if len(calls) < 5 || calls[0] != (call{StageResolve, 0, 0}) || calls[1] != (call{StagePull, 0, total}) ||
		calls[len(calls)-1] != (call{StageFinish, 0, 0}) || calls[len(calls)-2] != (call{StagePull, total, total}) {
		t.Fatalf("calls %v", calls)
	}
	pulls := calls[1 : len(calls)-1]
	for i, c := range pulls {
		if c.stage != StagePull || c.total != total || (i > 0 && c.done <= pulls[i-1].done) {
			t.Errorf("call %d: %+v after %+v", i, c, pulls[max(i-1, 0)])
		}
	}
	if len(pulls) > int(total/progressStep)+3 {
		t.Errorf("%d pull calls for %d bytes: not throttled", len(pulls), total)
	}
}

func TestPullPicksLinuxAMD64(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	arch := func(a string) v1.Image {
		return image(t, a, v1.Config{}, layer(t, file("bin/sh", "sh", 0o755), file("arch", a, 0o644)))
	}
	amd := arch("amd64")
	amdDigest, err := amd.Digest()
	if err != nil {
		t.Fatal(err)
	}
	both := pushIndex(t, host, "multiarch:v1", map[string]v1.Image{"linux/amd64": amd, "linux/arm64": arch("arm64")})
	noAMD := pushIndex(t, host, "noamd:v1", map[string]v1.Image{"linux/arm64": arch("arm64"), "linux/s390x": arch("s390x")})
	single, _ := push(t, host, "armonly:v1", arch("arm64"))

	tests := []struct {
		name, ref string
		wantErr   []string // substrings of an ErrNoPlatform error; nil means success
	}{
		{"index with amd64 and arm64", both, nil},
		{"index without amd64", noAMD, []string{"linux/arm64", "linux/s390x"}},
		{"single arm64 manifest", single, []string{"linux/arm64"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			img, err, target, parent := pullTo(t, newPuller(), tc.ref, Credentials{})
			if tc.wantErr != nil {
				t.Logf("err: %v", err)
				if !errors.Is(err, ErrNoPlatform) {
					t.Fatalf("err %v, want ErrNoPlatform", err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %s", err, s)
					}
				}
				assertGone(t, target, parent)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if img.Digest != amdDigest.String() || img.IndexDigest == "" {
				t.Errorf("digest %s (index %s), want the amd64 manifest %s", img.Digest, img.IndexDigest, amdDigest)
			}
			if b, _ := os.ReadFile(filepath.Join(target, "arch")); string(b) != "amd64" {
				t.Errorf("tree is from %q", b)
			}
			res, err := newPuller().Resolve(context.Background(), img.Pinned(), Credentials{})
			if err != nil || res.Digest != img.Digest || res.IndexDigest != "" {
				t.Errorf("resolve pinned %s: %+v, %v", img.Pinned(), res, err)
			}
		})
	}
}

func TestPullRefusesBadReferences(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	push(t, host, "exists:v1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "", 0o755))))
	tests := []struct {
		name, ref string
		want      error
	}{
		{"unknown tag", host + "/exists:nope", ErrNotFound},
		{"unknown repository", host + "/nope:v1", ErrNotFound},
		{"unknown digest", host + "/exists@sha256:" + strings.Repeat("ab", 32), ErrNotFound},
		{"malformed", host + "/UPPER case:v1", ErrInvalidReference},
		{"empty", "", ErrInvalidReference},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err, target, parent := pullTo(t, newPuller(), tc.ref, Credentials{})
			t.Logf("err: %v", err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			assertGone(t, target, parent)
		})
	}
}

func TestPullRefusesExistingTarget(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	ref, _ := push(t, host, "app:v1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "", 0o755))))
	target := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(filepath.Join(target, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := newPuller().Pull(context.Background(), Request{Ref: ref, Target: target})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("err %v, want fs.ErrExist", err)
	}
	if ents, _ := os.ReadDir(target); len(ents) != 1 || ents[0].Name() != "mine" {
		t.Errorf("existing target changed: %v", ents)
	}
}

func TestPullCanceled(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	ref, _ := push(t, host, "app:v1", image(t, "amd64", v1.Config{}, layer(t, file("bin/sh", "", 0o755))))
	parent := t.TempDir()
	target := filepath.Join(parent, "rootfs")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := newPuller().Pull(ctx, Request{Ref: ref, Target: target, Progress: func(s string, _, _ int64) {
		if s == StagePull {
			cancel() // once resolved, before the first layer
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	assertGone(t, target, parent)
}

func TestPullRefusesTooLargeTree(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	ref, _ := push(t, host, "app:v1", image(t, "amd64", v1.Config{},
		layer(t, file("bin/sh", "12345", 0o755)), layer(t, file("blob", "1234567890", 0o644))))
	p := New(Config{Limits: Limits{TreeBytes: 10}, SkipOwnership: !isRoot}, Deps{Dialer: loopback()})
	_, err, target, parent := pullTo(t, p, ref, Credentials{})
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), `"blob"`) {
		t.Fatalf("err %v, want ErrTooLarge naming blob", err)
	}
	assertGone(t, target, parent)
}

// As root, file capabilities and user xattrs survive; other namespaces are dropped.
func TestPullKeepsXattrs(t *testing.T) {
	t.Parallel()
	if !isRoot {
		t.Skip("setting security.capability needs root; ownership is skipped as non-root")
	}
	// VFS_CAP_REVISION_2 with the effective flag, permitted = CAP_NET_RAW (13).
	capNetRaw := "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	ping := file("bin/ping", "ping", 0o755)
	ping.pax = map[string]string{
		"SCHILY.xattr.security.capability": capNetRaw,
		"SCHILY.xattr.user.note":           "hello",
		"SCHILY.xattr.trusted.overlay.x":   "dropped",
	}
	host := newRegistry(t, nil)
	ref, _ := push(t, host, "xattr:v1", image(t, "amd64", v1.Config{}, layer(t, ping)))
	_, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(target, "bin/ping")
	for attr, want := range map[string]string{"security.capability": capNetRaw, "user.note": "hello"} {
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(p, attr, buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("%s: %q, %v; want %q", attr, buf[:max(n, 0)], err, want)
		}
	}
	if _, err := unix.Lgetxattr(p, "trusted.overlay.x", make([]byte, 64)); err == nil {
		t.Error("trusted.* xattr was applied")
	}
}

// A tree with read-only directories is removed after a failure even as non-root.
func TestRemoveTreeReadOnlyDirs(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(filepath.Join(dir, "ro/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ro/sub/f"), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"ro/sub", "ro"} {
		if err := os.Chmod(filepath.Join(dir, d), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := RemoveTree(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	tests := []struct {
		c       Credentials
		str     string
		wantErr bool
	}{
		{Credentials{}, "anonymous", false},
		{Credentials{Username: "u", Password: "secret"}, "basic(u:redacted)", false},
		{Credentials{Token: "secret"}, "token(redacted)", false},
		{Credentials{Username: "u"}, "basic(u:redacted)", true},
		{Credentials{Password: "secret", Token: "secret"}, "token(redacted)", true},
	}
	for _, tc := range tests {
		t.Run(tc.str, func(t *testing.T) {
			t.Parallel()
			if s := fmt.Sprint(tc.c); s != tc.str || strings.Contains(s, "secret") {
				t.Errorf("String %q, want %q", s, tc.str)
			}
			if _, err := tc.c.authenticator(); (err != nil) != tc.wantErr {
				t.Errorf("authenticator err %v, want error %v", err, tc.wantErr)
			}
		})
	}
}

// The finished tree never replaces a target that appeared meanwhile, even an empty one.
func TestRenameNoReplace(t *testing.T) {
	t.Parallel()
	d := t.TempDir()
	from, to := filepath.Join(d, "tmp"), filepath.Join(d, "target")
	for _, p := range []string{filepath.Join(from, "f"), to} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := renameNoReplace(from, to); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("err %v, want fs.ErrExist", err)
	}
	if err := os.Remove(to); err != nil {
		t.Fatal(err)
	}
	if err := renameNoReplace(from, to); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(to, "f")); err != nil {
		t.Errorf("tree not moved: %v", err)
	}
}
