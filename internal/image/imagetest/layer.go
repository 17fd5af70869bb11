package imagetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one tar entry of a test layer. Type is a tar type flag (tar.TypeReg, TypeDir,
// TypeSymlink, TypeLink, TypeChar, …). A zero ModTime means ModTime(); zero UID/GID is root.
type Entry struct {
	Name               string
	Type               byte
	Body               string // regular files only
	Link               string // symlink target, or the earlier entry a hard link names
	Mode               int64  // permission and special bits, as tar stores them (0o1777, 0o4755, …)
	UID, GID           int
	ModTime            time.Time
	Devmajor, Devminor int64 // device nodes
}

// ModTime is the mtime of every entry that does not set one, so builds are reproducible.
func ModTime() time.Time { return time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC) }

// File is a regular file.
func File(name, body string, mode int64) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Body: body, Mode: mode}
}

// Dir is a directory; name should end in "/".
func Dir(name string, mode int64) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: mode} }

// Symlink is a symbolic link to target.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Link: target, Mode: 0o777}
}

// Hardlink is a hard link to target, an entry's name (relative to the layer root).
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Link: target, Mode: 0o644}
}

// Whiteout deletes name (a path) as lower layers left it: the entry ".wh.<base>" beside it.
func Whiteout(name string) Entry {
	return File(path.Join(path.Dir(name), ".wh."+path.Base(name)), "", 0o600)
}

// Opaque hides everything lower layers put in dir: the entry "<dir>/.wh..wh..opq".
func Opaque(dir string) Entry { return File(path.Join(dir, ".wh..wh..opq"), "", 0o600) }

// TarBytes writes entries, in order, as an uncompressed PAX tar stream.
func TarBytes(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mt := e.ModTime
		if mt.IsZero() {
			mt = ModTime()
		}
		hdr := &tar.Header{
			Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode, Uid: e.UID, Gid: e.GID,
			ModTime: mt, Devmajor: e.Devmajor, Devminor: e.Devminor, Format: tar.FormatPAX,
		}
		if e.Type == tar.TypeReg {
			hdr.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("imagetest: write tar header %q: %v", e.Name, err)
		}
		if _, err := io.WriteString(tw, e.Body); err != nil {
			t.Fatalf("imagetest: write tar entry %q: %v", e.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatalf("imagetest: close tar stream: %v", err)
	}
	return buf.Bytes()
}

// Layer is a gzip-compressed OCI layer of entries, in order.
func Layer(t testing.TB, entries ...Entry) v1.Layer {
	t.Helper()
	return LayerFromTar(t, TarBytes(t, entries...))
}

// LayerFromTar is a gzip-compressed OCI layer of an uncompressed tar stream. The bytes
// are compressed once, here, so digest, push and pull all see the same blob.
func LayerFromTar(t testing.TB, tarStream []byte) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(tarStream); err != nil {
		t.Fatalf("imagetest: compress layer: %v", err)
	}
	if err := zw.Close(); err != nil {
		t.Fatalf("imagetest: compress layer: %v", err)
	}
	gz := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatalf("imagetest: make layer: %v", err)
	}
	return l
}

// Image is an OCI image (OCI manifest and config media types) for linux/amd64 of
// layers, bottom first, with cfg as its runtime config.
func Image(t testing.TB, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatalf("imagetest: append layers: %v", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("imagetest: read config: %v", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	cf.Created = v1.Time{Time: ModTime()}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatalf("imagetest: set config: %v", err)
	}
	return img
}

// LayerDigests lists the digests ("sha256:…") of img's layer blobs, bottom first.
func LayerDigests(t testing.TB, img v1.Image) []string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatalf("imagetest: list layers: %v", err)
	}
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatalf("imagetest: layer digest: %v", err)
		}
		out = append(out, d.String())
	}
	return out
}

// TreeFacts describe what a flattened tree must (and must not) hold. Paths are
// relative to the tree's root, slash-separated.
type TreeFacts struct {
	Files    map[string]string // regular file → exact content
	Symlinks map[string]string // symlink → target
	Dirs     []string          // directories
	Absent   []string          // nothing at all there
}

// Check reports (t.Errorf) every fact the tree at root breaks.
func (f TreeFacts) Check(t testing.TB, root string) {
	t.Helper()
	for _, p := range sortedKeys(f.Files) {
		fi, err := os.Lstat(filepath.Join(root, p))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: want a regular file, got %v (err %v)", p, modeOf(fi), err)
			continue
		}
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != f.Files[p] {
			t.Errorf("%s: content %q (err %v), want %q", p, b, err, f.Files[p])
		}
	}
	for _, p := range sortedKeys(f.Symlinks) {
		if got, err := os.Readlink(filepath.Join(root, p)); err != nil || got != f.Symlinks[p] {
			t.Errorf("%s: symlink to %q (err %v), want %q", p, got, err, f.Symlinks[p])
		}
	}
	for _, p := range f.Dirs {
		if fi, err := os.Lstat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("%s: want a directory, got %v (err %v)", p, modeOf(fi), err)
		}
	}
	for _, p := range f.Absent {
		if fi, err := os.Lstat(filepath.Join(root, p)); !os.IsNotExist(err) {
			t.Errorf("%s: want nothing there, got %v (err %v)", p, modeOf(fi), err)
		}
	}
}

func modeOf(fi os.FileInfo) any {
	if fi == nil {
		return "nothing"
	}
	return fi.Mode()
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
