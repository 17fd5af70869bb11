package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// isRoot: ownership and file capabilities are only asserted when the tests can set them.
var isRoot = os.Geteuid() == 0

// t0 is the mtime test entries get unless they say otherwise.
var t0 = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// newRegistry serves go-containerregistry's in-memory registry on 127.0.0.1, behind
// wrap (nil: none), and returns its host:port.
func newRegistry(t *testing.T, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// ent is one tar entry of a test layer.
type ent struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	uid, gid int
	mtime    time.Time
	pax      map[string]string
}

func file(name, body string, mode int64) ent {
	return ent{name: name, typ: tar.TypeReg, body: body, mode: mode}
}
func dir(name string, mode int64) ent { return ent{name: name, typ: tar.TypeDir, mode: mode} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func hardlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeLink, link: target, mode: 0o644}
}
func whiteout(name string) ent { return file(name, "", 0o600) }

// tarBytes writes entries as an uncompressed tar stream.
func tarBytes(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		mt := e.mtime
		if mt.IsZero() {
			mt = t0
		}
		hdr := &tar.Header{
			Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			ModTime: mt, Size: int64(len(e.body)), PAXRecords: e.pax, Format: tar.FormatPAX,
		}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if e.typ == tar.TypeChar || e.typ == tar.TypeBlock {
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %s: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("tar body %s: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layer is a gzip-compressed layer of entries.
func layer(t *testing.T, ents ...ent) v1.Layer {
	t.Helper()
	b := tarBytes(t, ents...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// image builds an OCI image of layers for arch, with cfg as its config.
func image(t *testing.T, arch string, cfg v1.Config, layers ...v1.Layer) v1.Image {
	t.Helper()
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", arch, cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// push writes img to host/repo:tag and returns the reference and manifest digest.
func push(t *testing.T, host, repo string, img v1.Image) (string, string) {
	t.Helper()
	ref := host + "/" + repo
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return ref, d.String()
}

// pushIndex writes an index of imgs (one per platform "os/arch") and returns its reference.
func pushIndex(t *testing.T, host, repo string, imgs map[string]v1.Image) string {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	keys := make([]string, 0, len(imgs))
	for k := range imgs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		os, arch, _ := strings.Cut(k, "/")
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        imgs[k],
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: os, Architecture: arch}},
		})
	}
	ref := host + "/" + repo
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatalf("push index %s: %v", ref, err)
	}
	return ref
}

// pullTo pulls ref into a fresh directory and returns the image, the error, the target
// and its parent (which holds nothing else).
func pullTo(t *testing.T, p *Puller, ref string, auth Credentials) (*Image, error, string, string) {
	t.Helper()
	parent := t.TempDir()
	target := filepath.Join(parent, "rootfs")
	img, err := p.Pull(context.Background(), Request{Ref: ref, Auth: auth, Target: target})
	return img, err, target, parent
}

func newPuller() *Puller { return New(Config{SkipOwnership: !isRoot}, Deps{Dialer: loopback()}) }

// listTree describes every entry below root, one line each, sorted:
// "path type perm uid:gid mtime content|-> target". Ownership is shown only as root.
func listTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		out = append(out, describeEntry(t, rel, p, fi))
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	slices.Sort(out)
	return out
}

func describeEntry(t *testing.T, rel, p string, fi fs.FileInfo) string {
	t.Helper()
	owner := "-"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && isRoot {
		owner = fmt.Sprintf("%d:%d", st.Uid, st.Gid)
	}
	line := fmt.Sprintf("%s %s %04o %s %d", rel, typeOf(fi), perm(fi), owner, fi.ModTime().Unix())
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		line += " -> " + target
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		line += " " + string(b)
	}
	return line
}

func typeOf(fi fs.FileInfo) string {
	switch {
	case fi.IsDir():
		return "d"
	case fi.Mode()&fs.ModeSymlink != 0:
		return "l"
	case fi.Mode().IsRegular():
		return "f"
	}
	return "?"
}

// perm is the mode's permission and special bits in the octal form tar uses.
func perm(fi fs.FileInfo) uint32 {
	m := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSetuid != 0 {
		m |= 0o4000
	}
	if fi.Mode()&fs.ModeSetgid != 0 {
		m |= 0o2000
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		m = 0o777
	}
	return m
}

// ownerOK replaces uid:gid with "-" in want lines when not root (ownership unasserted).
func ownerOK(want []string) []string {
	if isRoot {
		return want
	}
	out := make([]string, len(want))
	for i, w := range want {
		f := strings.SplitN(w, " ", 5)
		f[3] = "-"
		out[i] = strings.Join(f, " ")
	}
	return out
}

// assertGone checks that a failed pull left neither the target nor a temporary tree.
func assertGone(t *testing.T, target, parent string) {
	t.Helper()
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("target %s exists after a failed pull (err %v)", target, err)
	}
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		t.Errorf("left behind in %s: %s", parent, e.Name())
	}
}
