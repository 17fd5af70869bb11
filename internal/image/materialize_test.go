package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/testutil"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// fixture is a registry, a chunk store over a local blob dir and a work dir.
type fixture struct {
	host   string
	work   string
	chunks *chunk.Store
	imager TreeImager
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not installed (scripts/install-deps.sh)", tool)
		}
	}
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	bl, err := localdir.New(localdir.Config{Dir: t.TempDir()}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize, Parallel: 2}, chunk.Deps{Blob: bl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cs.Close)
	b, err := vmimage.New(vmimage.Config{CacheDir: t.TempDir(), KernelImage: "/unused"}, vmimage.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{host: strings.TrimPrefix(srv.URL, "http://"), work: t.TempDir(), chunks: cs, imager: b}
}

func (f *fixture) materializer(t *testing.T, imager TreeImager) *Materializer {
	t.Helper()
	m, err := New(Config{WorkDir: f.work, DefaultDiskGiB: 1}, Deps{
		Puller: oci.New(oci.Config{SkipOwnership: os.Geteuid() != 0}, oci.Deps{Dialer: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})}),
		Imager: imager, Chunks: f.chunks,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// push builds a one-layer image of files (name → body; names ending in "/" are
// directories, "bin/…" files are executable) and pushes it as host/repo:latest.
func push(t *testing.T, host, repo string, files map[string]string) string {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, n := range names {
		hdr := &tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mt, Size: int64(len(files[n]))}
		switch {
		case strings.HasSuffix(n, "/"):
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(n, "bin/"):
			hdr.Mode = 0o755
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/root", Cmd: []string{"/bin/sh"}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref := host + "/" + repo + ":latest"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

var busybox = map[string]string{
	"bin/":           "",
	"bin/sh":         "#!fake busybox\n" + strings.Repeat("x", 64<<10),
	"etc/":           "",
	"etc/passwd":     "root:x:0:0:root:/root:/bin/sh\n",
	"etc/os-release": "ID=test\n",
	"root/":          "",
}

// recorder keeps the order stages were first reported in.
type recorder struct {
	mu     sync.Mutex
	stages []string
}

func (r *recorder) progress(stage string, done, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.stages); n == 0 || r.stages[n-1] != stage {
		r.stages = append(r.stages, stage)
	}
}

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("work dir %s not empty: %v", dir, ents)
	}
}

func TestMaterializeDeterministic(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ref := push(t, f.host, "busybox", busybox)
	m := f.materializer(t, f.imager)
	ctx := context.Background()

	var rec recorder
	first, err := m.Materialize(ctx, Request{Ref: ref, Progress: rec.progress})
	if err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, f.work)
	if want := []string{StageResolve, StagePull, StageRootFS, StageChunks}; !slices.Equal(rec.stages, want) {
		t.Errorf("stages %v, want %v", rec.stages, want)
	}
	if !strings.HasPrefix(first.Digest, "sha256:") || first.Config.WorkingDir != "/root" ||
		first.DiskBytes != 1<<30 || first.RootFS.Size != 1<<30 || first.TreeBytes < 64<<10 ||
		first.CompressedBytes <= 0 {
		t.Errorf("first result: %+v", first)
	}
	if first.Upload.Uploaded == 0 || first.RootFS.ChunkSize != chunk.DiskChunkSize {
		t.Errorf("first upload: %+v, chunk size %d", first.Upload, first.RootFS.ChunkSize)
	}

	t.Logf("first: chunks %d uploaded %d bytes %d", first.Upload.Chunks, first.Upload.Uploaded, first.Upload.UploadedBytes)
	second, err := m.Materialize(ctx, Request{Ref: ref, DiskGiB: 1})
	if err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, f.work)
	a, err := first.RootFS.Encode()
	if err != nil {
		t.Fatal(err)
	}
	b, err := second.RootFS.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || second.Digest != first.Digest {
		t.Errorf("same image, different manifests:\n%s\n%s", a, b)
	}
	if second.Upload.Uploaded != 0 || second.Upload.UploadedBytes != 0 {
		t.Errorf("second materialize uploaded %+v, want nothing", second.Upload)
	}
}

// tooSmall is a TreeImager whose filesystems never fit.
type tooSmall struct{}

func (tooSmall) TreeImage(context.Context, vmimage.TreeImageSpec) error {
	return vmimage.ErrTreeTooLarge
}

func TestMaterializeRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	noShell := map[string]string{"etc/": "", "etc/passwd": "root:x:0:0::/:/nope\n"}
	tests := []struct {
		name   string
		files  map[string]string
		imager TreeImager
		want   error
		stages []string
	}{
		{"no shell", noShell, f.imager, oci.ErrNoShell, []string{StageResolve, StagePull}},
		{"tree too large", busybox, tooSmall{}, vmimage.ErrTreeTooLarge, []string{StageResolve, StagePull, StageRootFS}},
	}
	for _, tc := range tests {
		ref := push(t, f.host, strings.ReplaceAll(tc.name, " ", "-"), tc.files)
		var rec recorder
		_, err := f.materializer(t, tc.imager).Materialize(context.Background(), Request{Ref: ref, Progress: rec.progress})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		if !slices.Equal(rec.stages, tc.stages) {
			t.Errorf("%s: stages %v, want %v", tc.name, rec.stages, tc.stages)
		}
		assertEmpty(t, f.work)
	}
	if _, err := f.materializer(t, f.imager).Materialize(context.Background(), Request{Ref: "bad ref!"}); !errors.Is(err, oci.ErrInvalidReference) {
		t.Errorf("bad ref: %v", err)
	}
}

// TestNewSweepsStaleWorkDirs: a killed process's work dirs older than
// StaleAfter are removed at start; younger ones (another replica's job in
// flight) and unrelated entries stay.
func TestNewSweepsStaleWorkDirs(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	old := time.Now().Add(-7 * time.Hour)
	mk := func(name string, mtime time.Time) string {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Join(p, "tree", "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale, fresh, other := mk("materialize-111", old), mk("materialize-222", time.Now()), mk("keep-me", old)
	if _, err := New(Config{WorkDir: work}, Deps{Puller: oci.New(oci.Config{}, oci.Deps{}), Imager: nopImager{}, Chunks: nopChunks{}}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{stale: false, fresh: true, other: true} {
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(p), err == nil, want)
		}
	}
}

type nopImager struct{}

func (nopImager) TreeImage(context.Context, vmimage.TreeImageSpec) error { return nil }

type nopChunks struct{}

func (nopChunks) PutFile(context.Context, string) (chunk.Manifest, chunk.PutStats, error) {
	return chunk.Manifest{}, chunk.PutStats{}, nil
}
