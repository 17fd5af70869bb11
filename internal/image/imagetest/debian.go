package imagetest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/testutil"
)

const (
	// DebianSuite is the release Debian and DebianPlus bootstrap.
	DebianSuite = "bookworm"
	// debianLayerVersion is part of the cache key: bump it when the layer's content
	// rules change, so every cached layer is rebuilt.
	debianLayerVersion  = "1"
	defaultDebianMirror = "http://deb.debian.org/debian"
	// debootstrapTimeout bounds one debootstrap run (30–90 s normally).
	debootstrapTimeout = 15 * time.Minute
)

// Environment variables the Debian builder reads.
const (
	// EnvCache names the cache directory (default $XDG_CACHE_HOME/engrams-test, else
	// ~/.cache/engrams-test).
	EnvCache = "ENGRAMS_TEST_CACHE"
	// EnvDebianMirror overrides the Debian mirror (default: the one apt uses for
	// DebianSuite, else http://deb.debian.org/debian).
	EnvDebianMirror = "ENGRAMS_TEST_DEBIAN_MIRROR"
)

// Debian is a one-layer image of a debootstrapped Debian (DebianSuite, minbase
// variant, glibc): /dev, /proc and /sys empty, no downloaded .deb files or apt lists.
// The layer is built once (30–90 s, as root, with debootstrap and the network) and
// cached under CacheDir; later calls in any process reuse it. Without a cached layer
// it skips (fails under CI) when debootstrap is missing or the caller is not root.
func Debian(t testing.TB) v1.Image {
	t.Helper()
	return Image(t, debianConfig(), DebianLayer(t))
}

// DebianPlus is Debian with one more small layer holding extra (path → content;
// content starting with "#!" is made executable, anything else mode 0644): the same
// image rebuilt with one changed layer.
func DebianPlus(t testing.TB, extra map[string]string) v1.Image {
	t.Helper()
	var ents []Entry
	for _, p := range sortedKeys(extra) {
		mode := int64(0o644)
		if strings.HasPrefix(extra[p], "#!") {
			mode = 0o755
		}
		ents = append(ents, File(strings.TrimPrefix(p, "/"), extra[p], mode))
	}
	return Image(t, debianConfig(), DebianLayer(t), Layer(t, ents...))
}

// DebianWith is Debian with more Debian packages installed by debootstrap
// (--include), e.g. "git": a layer of its own, cached like Debian's.
func DebianWith(t testing.TB, packages ...string) v1.Image {
	t.Helper()
	return Image(t, debianConfig(), debianLayer(t, packages))
}

func debianConfig() v1.Config {
	return v1.Config{Env: []string{defaultPath}, WorkingDir: "/", Cmd: []string{"bash"}}
}

// DebianLayer is Debian's only layer: the cached gzip tarball, served from its file
// with the digest and diff_id recorded when it was built (nothing is recompressed or
// rehashed per consumer).
func DebianLayer(t testing.TB) v1.Layer {
	t.Helper()
	return debianLayer(t, nil)
}

// debianLayer is the layer of a minbase debootstrap with packages included.
func debianLayer(t testing.TB, packages []string) v1.Layer {
	t.Helper()
	dir, err := CacheDir()
	if err != nil {
		testutil.SkipOrFail(t, "no cache directory for the Debian layer: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("imagetest: create cache dir %s: %v", dir, err)
	}
	mirror := debianMirror()
	key := debianKey(mirror, packages)
	base := filepath.Join(dir, key)
	unlock := lockFile(t, base+".lock")
	defer unlock()
	if l, err := loadCachedLayer(base); err == nil {
		t.Logf("imagetest: Debian %s layer from the cache: %s", DebianSuite, base+".tar.gz")
		return l
	} else if !errors.Is(err, fs.ErrNotExist) {
		t.Logf("imagetest: cached Debian layer unusable, rebuilding: %v", err)
	}
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "building the Debian layer needs root for debootstrap (none cached at %s)", base+".tar.gz")
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		testutil.SkipOrFail(t, "debootstrap not installed (scripts/install-deps.sh); none cached at %s", base+".tar.gz")
	}
	removeStale(t, dir, key)
	start := time.Now()
	m, err := buildDebianLayer(t.Context(), t, dir, key, mirror, packages)
	if err != nil {
		t.Fatalf("imagetest: build Debian layer: %v", err)
	}
	t.Logf("imagetest: built the Debian %s layer from %s in %s: %d files, %.1f MB tree, %.1f MB gzip (%s)",
		DebianSuite, mirror, time.Since(start).Round(time.Millisecond), m.Files,
		float64(m.TreeBytes)/1e6, float64(m.Size)/1e6, base+".tar.gz")
	l, err := loadCachedLayer(base)
	if err != nil {
		t.Fatalf("imagetest: load the Debian layer just built: %v", err)
	}
	return l
}

// CacheDir is where expensive test fixtures are kept across runs: $ENGRAMS_TEST_CACHE,
// else $XDG_CACHE_HOME/engrams-test, else ~/.cache/engrams-test.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "engrams-test"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the cache dir: %w", err)
	}
	return filepath.Join(home, ".cache", "engrams-test"), nil
}

// debianKey names the cached layer after what decides its content.
func debianKey(mirror string, packages []string) string {
	id := DebianSuite + "\x00minbase\x00" + mirror + "\x00" + debianLayerVersion
	name := "minbase"
	if len(packages) > 0 {
		id += "\x00" + strings.Join(packages, ",")
		name += "+" + strings.Join(packages, "+")
	}
	h := sha256.Sum256([]byte(id))
	return fmt.Sprintf("debian-%s-%s-v%s-%s", DebianSuite, name, debianLayerVersion, hex.EncodeToString(h[:6]))
}

// debianMirror is EnvDebianMirror, else the first apt source for DebianSuite whose
// path ends in /debian, else deb.debian.org.
func debianMirror() string {
	if m := os.Getenv(EnvDebianMirror); m != "" {
		return m
	}
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append([]string{"/etc/apt/sources.list"}, files...)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorIn(string(b), strings.HasSuffix(f, ".sources")); m != "" {
			return m
		}
	}
	return defaultDebianMirror
}

// mirrorIn finds the mirror in one sources file: deb822 stanzas (.sources) or
// one-line "deb URI SUITE COMPONENTS" entries.
func mirrorIn(text string, deb822 bool) string {
	ok := func(uri string, suites []string) bool {
		return strings.HasSuffix(strings.TrimRight(uri, "/"), "/debian") && slices.Contains(suites, DebianSuite) &&
			(strings.HasPrefix(uri, "http://") || strings.HasPrefix(uri, "https://"))
	}
	if !deb822 {
		for _, l := range strings.Split(text, "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "deb" && !strings.HasPrefix(f[1], "[") && ok(f[1], f[2:3]) {
				return strings.TrimRight(f[1], "/")
			}
		}
		return ""
	}
	for _, stanza := range strings.Split(text, "\n\n") {
		fields := map[string][]string{}
		for _, l := range strings.Split(stanza, "\n") {
			if k, v, found := strings.Cut(l, ":"); found && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, " ") {
				fields[strings.ToLower(k)] = strings.Fields(v)
			}
		}
		if !slices.Contains(fields["types"], "deb") {
			continue
		}
		for _, uri := range fields["uris"] {
			if ok(uri, fields["suites"]) {
				return strings.TrimRight(uri, "/")
			}
		}
	}
	return ""
}

// lockFile takes an exclusive flock on p (created if needed), waiting for other
// processes (or other calls in this one: each open file is its own lock holder).
func lockFile(t testing.TB, p string) func() {
	t.Helper()
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if errors.Is(err, fs.ErrPermission) {
		f, err = os.Open(p) // another user's cache: flock works on a read-only file too
	}
	if err != nil {
		t.Fatalf("imagetest: open lock %s: %v", p, err)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		t.Fatalf("imagetest: lock %s: %v", p, err)
	}
	return func() { _ = f.Close() } // closing releases the lock
}

// layerMeta is recorded beside a cached layer when it is complete; it is written
// last, so its presence marks the tarball as finished.
type layerMeta struct {
	Digest    string  `json:"digest"`
	DiffID    string  `json:"diff_id"`
	Size      int64   `json:"size"`
	TreeBytes int64   `json:"tree_bytes"`
	Files     int     `json:"files"`
	Skipped   int     `json:"skipped"` // device nodes, sockets and FIFOs left out
	Mirror    string  `json:"mirror"`
	Built     string  `json:"built"`
	BuildSecs float64 `json:"build_seconds"`
}

// loadCachedLayer opens base.tar.gz as described by base.json; fs.ErrNotExist if
// either is missing.
func loadCachedLayer(base string) (v1.Layer, error) {
	b, err := os.ReadFile(base + ".json")
	if err != nil {
		return nil, err
	}
	var m layerMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read %s.json: %w", base, err)
	}
	fi, err := os.Stat(base + ".tar.gz")
	if err != nil {
		return nil, err
	}
	if fi.Size() != m.Size {
		return nil, fmt.Errorf("%s.tar.gz is %d bytes, %s.json says %d", base, fi.Size(), base, m.Size)
	}
	digest, err := v1.NewHash(m.Digest)
	if err != nil {
		return nil, fmt.Errorf("%s.json: digest: %w", base, err)
	}
	diffID, err := v1.NewHash(m.DiffID)
	if err != nil {
		return nil, fmt.Errorf("%s.json: diff_id: %w", base, err)
	}
	return partial.CompressedToLayer(&fileLayer{path: base + ".tar.gz", digest: digest, diffID: diffID, size: m.Size})
}

// fileLayer is a gzip layer blob in a file whose digests are known.
type fileLayer struct {
	path           string
	digest, diffID v1.Hash
	size           int64
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

// removeStale deletes what an interrupted build of key left in dir (the caller holds
// the lock, so no build is running).
func removeStale(t testing.TB, dir, key string) {
	t.Helper()
	leftovers, _ := filepath.Glob(filepath.Join(dir, key+".*-tmp*"))
	for _, p := range leftovers {
		if err := removeRootfs(p); err != nil {
			t.Logf("imagetest: remove stale %s: %v", p, err)
		}
	}
}

// buildDebianLayer debootstraps into a temporary directory in dir, writes the tree
// as base.tar.gz (temporary file, then rename) and finally base.json.
func buildDebianLayer(ctx context.Context, t testing.TB, dir, key, mirror string, packages []string) (layerMeta, error) {
	start := time.Now()
	rootfs, err := os.MkdirTemp(dir, key+".rootfs-tmp")
	if err != nil {
		return layerMeta{}, fmt.Errorf("create rootfs dir: %w", err)
	}
	defer func() {
		if err := removeRootfs(rootfs); err != nil {
			t.Logf("imagetest: remove %s: %v", rootfs, err)
		}
	}()
	if err := debootstrap(ctx, rootfs, mirror, packages); err != nil {
		return layerMeta{}, err
	}
	t.Logf("imagetest: debootstrap %s took %s", DebianSuite, time.Since(start).Round(time.Millisecond))
	tmp, err := os.CreateTemp(dir, key+".tar.gz-tmp")
	if err != nil {
		return layerMeta{}, fmt.Errorf("create layer file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails harmlessly once renamed
	m, err := writeLayer(tmp, rootfs)
	if err == nil {
		err = tmp.Chmod(0o644) // readable by non-root runs sharing the cache
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return layerMeta{}, fmt.Errorf("write layer %s: %w", tmp.Name(), err)
	}
	base := filepath.Join(dir, key)
	if err := os.Rename(tmp.Name(), base+".tar.gz"); err != nil {
		return layerMeta{}, fmt.Errorf("install layer: %w", err)
	}
	m.Mirror, m.Built, m.BuildSecs = mirror, time.Now().UTC().Format(time.RFC3339), time.Since(start).Seconds()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return layerMeta{}, fmt.Errorf("encode layer metadata: %w", err)
	}
	if err := writeFileAtomic(base+".json", b); err != nil {
		return layerMeta{}, fmt.Errorf("install layer metadata: %w", err)
	}
	return m, nil
}

// debootstrap runs debootstrap --variant=minbase into rootfs.
func debootstrap(ctx context.Context, rootfs, mirror string, packages []string) error {
	ctx, cancel := context.WithTimeout(ctx, debootstrapTimeout)
	defer cancel()
	args := []string{"--variant=minbase"}
	if len(packages) > 0 {
		args = append(args, "--include="+strings.Join(packages, ","))
	}
	cmd := exec.CommandContext(ctx, "debootstrap", append(args, DebianSuite, rootfs, mirror)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		tail := out.String()
		if len(tail) > 4000 {
			tail = "…" + tail[len(tail)-4000:]
		}
		return fmt.Errorf("debootstrap %s %s %s: %w\n%s", strings.Join(args, " "), DebianSuite, mirror, err, tail)
	}
	return nil
}

func writeFileAtomic(p string, b []byte) error {
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// removeRootfs removes a debootstrap target, first detaching anything still mounted
// below it (debootstrap mounts /proc and /sys there and may die before unmounting):
// a recursive removal must never descend into a live /proc or /sys.
func removeRootfs(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, mp := range mounts { // deepest first
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmount %s: %w", mp, err)
		}
	}
	if left, err := mountsUnder(dir); err != nil || len(left) > 0 {
		return fmt.Errorf("still mounted below %s: %v (%v); not removing it", dir, left, err)
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	defer f.Close()
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if mp == abs || strings.HasPrefix(mp, abs+"/") {
			out = append(out, mp)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mounts: %w", err)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, …).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// excluded reports whether the tree entry rel (slash-separated) stays out of the
// layer: the content of /dev, /proc and /sys, downloaded packages and apt's lists
// and caches. The directories themselves stay.
func excluded(rel string, isDir bool) bool {
	for _, d := range []string{"dev/", "proc/", "sys/"} {
		if strings.HasPrefix(rel, d) {
			return true
		}
	}
	switch parent, base := path.Dir(rel), path.Base(rel); {
	case parent == "var/cache/apt/archives":
		return strings.HasSuffix(base, ".deb")
	case parent == "var/cache/apt":
		return strings.HasSuffix(base, ".bin")
	case strings.HasPrefix(rel, "var/lib/apt/lists/"):
		return !(isDir && rel == "var/lib/apt/lists/partial")
	}
	return false
}

// countingHash hashes and counts what is written through it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// writeLayer writes the tree at root as a gzip-compressed tar stream to w, in
// lexical order with numeric owners, hard links kept and file capabilities carried
// as PAX xattrs, and returns its digests and counts.
func writeLayer(w io.Writer, root string) (layerMeta, error) {
	compressed := &countingHash{h: sha256.New()}
	zw, err := gzip.NewWriterLevel(io.MultiWriter(w, compressed), gzip.DefaultCompression)
	if err != nil {
		return layerMeta{}, err
	}
	uncompressed := &countingHash{h: sha256.New()}
	tw := tar.NewWriter(io.MultiWriter(zw, uncompressed))
	var m layerMeta
	links := map[[2]uint64]string{} // (dev, inode) → first name, for hard links
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if excluded(rel, d.IsDir()) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return addEntry(tw, p, rel, fi, links, &m)
	})
	if err != nil {
		return layerMeta{}, err
	}
	if err := tw.Close(); err != nil {
		return layerMeta{}, err
	}
	if err := zw.Close(); err != nil {
		return layerMeta{}, err
	}
	m.Digest = "sha256:" + hex.EncodeToString(compressed.h.Sum(nil))
	m.DiffID = "sha256:" + hex.EncodeToString(uncompressed.h.Sum(nil))
	m.Size = compressed.n
	return m, nil
}

// addEntry writes one file, directory, symlink or hard link; other types (device
// nodes, sockets, FIFOs) are counted in m.Skipped and left out.
func addEntry(tw *tar.Writer, p, rel string, fi fs.FileInfo, links map[[2]uint64]string, m *layerMeta) error {
	mode := fi.Mode()
	if !mode.IsRegular() && !mode.IsDir() && mode&fs.ModeSymlink == 0 {
		m.Skipped++
		return nil
	}
	var target string
	if mode&fs.ModeSymlink != 0 {
		t, err := os.Readlink(p)
		if err != nil {
			return err
		}
		target = t
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	hdr.Name, hdr.Uname, hdr.Gname, hdr.Format = rel, "", "", tar.FormatPAX
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
	if mode.IsDir() {
		hdr.Name += "/"
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat data", rel)
	}
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if mode.IsRegular() && st.Nlink > 1 {
		id := [2]uint64{st.Dev, st.Ino}
		if first, ok := links[id]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return tw.WriteHeader(hdr)
		}
		links[id] = rel
	}
	if mode.IsRegular() {
		if capa, err := getxattr(p, "security.capability"); err == nil && len(capa) > 0 {
			hdr.PAXRecords = map[string]string{"SCHILY.xattr.security.capability": string(capa)}
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if !mode.IsRegular() {
		return nil
	}
	m.Files++
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, f)
	m.TreeBytes += n
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// getxattr reads one extended attribute of p (not following a symlink).
func getxattr(p, attr string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
