package harness

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/testutil"
)

// newTestBuilder is a Builder writing into a fresh directory; without
// mkfs.erofs it skips (fails under CI).
func newTestBuilder(t *testing.T, cfg Config) *Builder {
	t.Helper()
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
	}
	if cfg.OutDir == "" {
		cfg.OutDir = t.TempDir()
	}
	b, err := New(cfg, Deps{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return b
}

// testFile is one entry of a tree written by writeTree.
type testFile struct {
	path string
	body string // file content; for a symlink, its target
	mode fs.FileMode
	link bool
}

// scriptDescriptor describes a tree whose entrypoint is bin/run.
func scriptDescriptor(entry ...string) string {
	if len(entry) == 0 {
		entry = []string{"bin/run"}
	}
	d := guestapi.HarnessDescriptor{Format: 1, Name: "test", Version: "1.0", Entrypoint: entry, Protocol: guestapi.HarnessProtocolShell,
		Requires: guestapi.HarnessRequires{Libc: guestapi.LibcNone}}
	b, err := d.Marshal()
	if err != nil {
		panic(err)
	}
	return string(b)
}

// baseTree is a small bundle tree: a descriptor, a script, nested
// directories, a symlink and an empty file.
func baseTree() []testFile {
	return []testFile{
		{path: guestapi.HarnessDescriptorFile, body: scriptDescriptor(), mode: 0o644},
		{path: "bin/run", body: "#!/bin/sh\necho run \"$@\"\n", mode: 0o755},
		{path: "lib/a/b/data.txt", body: strings.Repeat("data\n", 2000), mode: 0o644},
		{path: "lib/a/empty", mode: 0o644},
		{path: "lib/link", body: "a/b/data.txt", link: true},
	}
}

// writeTree writes files under a new directory, in the given order.
func writeTree(t *testing.T, files []testFile) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0o755))
	for _, f := range files {
		p := filepath.Join(dir, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if f.link {
			err = os.Symlink(f.body, p)
		} else if err = os.WriteFile(p, []byte(f.body), f.mode); err == nil {
			err = os.Chmod(p, f.mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			err = os.Chmod(p, 0o755) // whatever the umask
		}
		return err
	}))
	return dir
}

func TestBuildIsDeterministic(t *testing.T) {
	t.Parallel()
	b := newTestBuilder(t, Config{})
	ctx := context.Background()
	first, err := b.Build(ctx, BuildSpec{Dir: writeTree(t, baseTree())})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	if !strings.HasPrefix(first.Digest, "sha256:") || filepath.Base(first.Path) != BundleFileName(first.Digest) {
		t.Fatalf("bundle %+v is not named by its digest", first)
	}
	if d, _, err := fileDigest(first.Path); err != nil || d != first.Digest {
		t.Fatalf("the file's digest is %s (%v), the bundle says %s", d, err, first.Digest)
	}
	if first.SizeBytes%4096 != 0 || first.SizeBytes > first.TreeBytes+64<<10 {
		t.Fatalf("bundle of %d bytes for a tree of %d: not sized to fit", first.SizeBytes, first.TreeBytes)
	}

	// The same tree written in the opposite order, later, with other times
	// and (as root) another owner, gives the same bytes.
	files := baseTree()
	slices.Reverse(files[2:])
	dir := writeTree(t, files)
	old := time.Unix(1_000_000, 0)
	_ = filepath.WalkDir(dir, func(p string, _ fs.DirEntry, _ error) error {
		_ = os.Chtimes(p, old, old)
		if os.Geteuid() == 0 {
			_ = os.Lchown(p, 1234, 5678)
		}
		return nil
	})
	again, err := b.Build(ctx, BuildSpec{Dir: dir})
	if err != nil {
		t.Fatalf("Build again: %v", err)
	}
	if again.Digest != first.Digest {
		t.Fatalf("same tree, digests %s and %s", first.Digest, again.Digest)
	}

	// One changed byte or mode changes the digest.
	for i, change := range []func([]testFile){
		func(f []testFile) { f[2].body += "x" },
		func(f []testFile) { f[3].mode = 0o664 },
	} {
		files := baseTree()
		change(files)
		other, err := b.Build(ctx, BuildSpec{Dir: writeTree(t, files)})
		if err != nil {
			t.Fatalf("Build changed tree %d: %v", i, err)
		}
		if other.Digest == first.Digest {
			t.Fatalf("changed tree %d has the same digest", i)
		}
	}
}

func TestBuildCompressed(t *testing.T) {
	t.Parallel()
	b := newTestBuilder(t, Config{})
	dir := writeTree(t, append(baseTree(), testFile{path: "lib/big", body: strings.Repeat("compressible ", 100_000), mode: 0o644}))
	plain, err := b.Build(context.Background(), BuildSpec{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var digests []string
	for range 2 {
		z, err := b.Build(context.Background(), BuildSpec{Dir: dir, Compression: CompressLZ4HC})
		if err != nil {
			t.Fatalf("Build lz4hc: %v", err)
		}
		if z.SizeBytes >= plain.SizeBytes {
			t.Fatalf("lz4hc bundle %d bytes, uncompressed %d", z.SizeBytes, plain.SizeBytes)
		}
		digests = append(digests, z.Digest)
	}
	if digests[0] != digests[1] {
		t.Fatalf("compressed builds differ: %v", digests)
	}
	if _, err := b.Build(context.Background(), BuildSpec{Dir: dir, Compression: "zstd"}); err == nil {
		t.Fatal("Build with compression zstd succeeded")
	}
}

// TestBuildRoundTrip extracts a bundle with fsck.erofs and compares it with
// the tree it was built from.
func TestBuildRoundTrip(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("fsck.erofs"); err != nil {
		testutil.SkipOrFail(t, "fsck.erofs not found: %v", err)
	}
	b := newTestBuilder(t, Config{})
	src := writeTree(t, baseTree())
	bundle, err := b.Build(context.Background(), BuildSpec{Dir: src})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x")
	if msg, err := exec.Command("fsck.erofs", "--extract="+out, bundle.Path).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs: %v: %s", err, msg)
	}
	for _, f := range baseTree() {
		p := filepath.Join(out, filepath.FromSlash(f.path))
		st, err := os.Lstat(p)
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		if f.link {
			if target, err := os.Readlink(p); err != nil || target != f.body {
				t.Fatalf("%s links to %q (%v), want %q", f.path, target, err, f.body)
			}
			continue
		}
		body, err := os.ReadFile(p)
		if err != nil || !bytes.Equal(body, []byte(f.body)) || st.Mode().Perm() != f.mode {
			t.Fatalf("%s: %v, mode %v (want %v), content equal %v", f.path, err, st.Mode().Perm(), f.mode, bytes.Equal(body, []byte(f.body)))
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (sys.Uid != 0 || sys.Gid != 0) {
			t.Fatalf("%s is owned by %d:%d, want root", f.path, sys.Uid, sys.Gid)
		}
	}
}

func TestBuildRefuses(t *testing.T) {
	t.Parallel()
	b := newTestBuilder(t, Config{})
	glibcProgram := dynamicGlibcProgram(t)
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
		want   error
		msg    string
	}{
		{"no descriptor", func(t *testing.T, dir string) { rm(t, dir, guestapi.HarnessDescriptorFile) }, guestapi.ErrInvalidHarnessDescriptor, "no such file"},
		{"descriptor symlink", func(t *testing.T, dir string) {
			rm(t, dir, guestapi.HarnessDescriptorFile)
			write(t, dir, "real.json", scriptDescriptor(), 0o644)
			must(t, os.Symlink("real.json", filepath.Join(dir, guestapi.HarnessDescriptorFile)))
		}, guestapi.ErrInvalidHarnessDescriptor, "not a regular file"},
		{"descriptor invalid", func(t *testing.T, dir string) { write(t, dir, guestapi.HarnessDescriptorFile, `{"format":1}`, 0o644) }, guestapi.ErrInvalidHarnessDescriptor, "name"},
		{"fifo", func(t *testing.T, dir string) { must(t, syscall.Mkfifo(filepath.Join(dir, "lib/fifo"), 0o644)) }, ErrInvalidTree, "lib/fifo"},
		{"setuid", func(t *testing.T, dir string) { must(t, syscall.Chmod(filepath.Join(dir, "bin/run"), 0o4755)) }, ErrInvalidTree, "setuid"},
		{"private file", func(t *testing.T, dir string) { must(t, os.Chmod(filepath.Join(dir, "lib/a/empty"), 0o600)) }, ErrInvalidTree, "not readable by all"},
		{"private dir", func(t *testing.T, dir string) { must(t, os.Chmod(filepath.Join(dir, "lib/a"), 0o750)) }, ErrInvalidTree, "not readable by all"},
		{"private root", func(t *testing.T, dir string) { must(t, os.Chmod(dir, 0o700)) }, ErrInvalidTree, "not readable by all"},
		{"entrypoint missing", func(t *testing.T, dir string) { rm(t, dir, "bin/run") }, ErrInvalidTree, "entrypoint[0]"},
		{"entrypoint not executable", func(t *testing.T, dir string) { must(t, os.Chmod(filepath.Join(dir, "bin/run"), 0o754)) }, ErrInvalidTree, "not executable by all"},
		{"entrypoint a directory", func(t *testing.T, dir string) {
			write(t, dir, guestapi.HarnessDescriptorFile, scriptDescriptor("lib/a"), 0o644)
		}, ErrInvalidTree, "not a regular file"},
		{"second element missing", func(t *testing.T, dir string) {
			write(t, dir, guestapi.HarnessDescriptorFile, scriptDescriptor("bin/run", "lib/cli.js"), 0o644)
		}, ErrInvalidTree, "entrypoint[1]"},
		{"entrypoint absolute symlink", func(t *testing.T, dir string) {
			rm(t, dir, "bin/run")
			must(t, os.Symlink("/bin/sh", filepath.Join(dir, "bin/run")))
		}, ErrInvalidTree, "absolute path"},
		{"entrypoint symlink out", func(t *testing.T, dir string) {
			rm(t, dir, "bin/run")
			must(t, os.Symlink("../../outside", filepath.Join(dir, "bin/run")))
		}, ErrInvalidTree, "out of the bundle"},
		{"entrypoint symlink loop", func(t *testing.T, dir string) {
			rm(t, dir, "bin/run")
			must(t, os.Symlink("run", filepath.Join(dir, "bin/run")))
		}, ErrInvalidTree, "too many levels"},
		{"glibc program, libc none", func(t *testing.T, dir string) {
			copyFile(t, glibcProgram, filepath.Join(dir, "bin/run"))
		}, ErrInvalidTree, "requires.libc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeTree(t, baseTree())
			tc.change(t, dir)
			_, err := b.Build(context.Background(), BuildSpec{Dir: dir})
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Build = %v, want %v mentioning %q", err, tc.want, tc.msg)
			}
		})
	}
	if ents, _ := os.ReadDir(b.cfg.OutDir); len(ents) != 0 {
		t.Fatalf("refused builds left %d files in the output dir", len(ents))
	}
}

func TestBuildAccepts(t *testing.T) {
	t.Parallel()
	b := newTestBuilder(t, Config{})
	glibcProgram := dynamicGlibcProgram(t)
	info, err := inspectELF(glibcProgram)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"entrypoint through symlinks inside", func(t *testing.T, dir string) {
			must(t, os.Symlink("../bin", filepath.Join(dir, "lib/bindir")))
			must(t, os.Symlink("bindir/run", filepath.Join(dir, "lib/run")))
			write(t, dir, guestapi.HarnessDescriptorFile, scriptDescriptor("lib/run", "lib/link"), 0o644)
		}},
		{"absolute symlink elsewhere", func(t *testing.T, dir string) {
			must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "lib/passwd")))
		}},
		{"glibc program, libc glibc", func(t *testing.T, dir string) {
			copyFile(t, glibcProgram, filepath.Join(dir, "bin/run"))
			d, _ := guestapi.ParseHarnessDescriptor([]byte(scriptDescriptor()))
			d.Requires = guestapi.HarnessRequires{Libc: guestapi.LibcGlibc, GlibcMin: info.GlibcMin}
			must(t, writeDescriptor(dir, d))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := writeTree(t, baseTree())
			tc.change(t, dir)
			if _, err := b.Build(context.Background(), BuildSpec{Dir: dir}); err != nil {
				t.Fatalf("Build: %v", err)
			}
		})
	}
}

func TestInspectELF(t *testing.T) {
	t.Parallel()
	glibc := dynamicGlibcProgram(t)
	info, err := inspectELF(glibc)
	if err != nil || info.Libc != guestapi.LibcGlibc || info.GlibcMin == "" || guestapi.CompareVersions(info.GlibcMin, "2.2") < 0 {
		t.Fatalf("inspectELF(%s) = %+v, %v; want glibc with a version", glibc, info, err)
	}
	static := staticProgram(t)
	if info, err := inspectELF(static); err != nil || info.Libc != guestapi.LibcNone || len(info.Libs) != 0 {
		t.Fatalf("inspectELF(%s) = %+v, %v; want static", static, info, err)
	}
	if musl := muslProgram(t); musl != "" {
		if info, err := inspectELF(musl); err != nil || info.Libc != guestapi.LibcMusl || info.GlibcMin != "" {
			t.Fatalf("inspectELF(%s) = %+v, %v; want musl", musl, info, err)
		}
	}
	script := filepath.Join(t.TempDir(), "s")
	write(t, filepath.Dir(script), "s", "#!/bin/sh\n", 0o755)
	if ok, err := isELF(script); ok || err != nil {
		t.Fatalf("isELF(script) = %v, %v", ok, err)
	}
}

// dynamicGlibcProgram is a host program linked against glibc.
func dynamicGlibcProgram(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/bin/true", "/usr/bin/true", "/bin/ls"} {
		if info, err := inspectELF(p); err == nil && info.Libc == guestapi.LibcGlibc {
			return p
		}
	}
	testutil.SkipOrFail(t, "no glibc-linked program on this host")
	return ""
}

// staticProgram is a static host program (busybox-static is a dependency).
func staticProgram(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if info, err := inspectELF(p); err == nil && info.Libc == guestapi.LibcNone {
			return p
		}
	}
	testutil.SkipOrFail(t, "no static busybox on this host (scripts/install-deps.sh installs busybox-static)")
	return ""
}

// muslProgram compiles a tiny program with musl-gcc; "" when there is none.
func muslProgram(t *testing.T) string {
	t.Helper()
	cc, err := exec.LookPath("musl-gcc")
	if err != nil {
		testutil.SkipOrFail(t, "musl-gcc not found (scripts/install-deps.sh installs musl-tools)")
		return ""
	}
	dir := t.TempDir()
	write(t, dir, "m.c", "int main(void){return 0;}\n", 0o644)
	out := filepath.Join(dir, "m")
	if msg, err := exec.Command(cc, "-o", out, filepath.Join(dir, "m.c")).CombinedOutput(); err != nil {
		t.Fatalf("musl-gcc: %v: %s", err, msg)
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func rm(t *testing.T, dir, rel string) {
	t.Helper()
	must(t, os.Remove(filepath.Join(dir, filepath.FromSlash(rel))))
}

func write(t *testing.T, dir, rel, body string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(body), mode))
	must(t, os.Chmod(p, mode))
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	must(t, err)
	_ = os.Remove(dst)
	must(t, os.WriteFile(dst, data, 0o755))
	must(t, os.Chmod(dst, 0o755))
}
