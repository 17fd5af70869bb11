package image

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// Progress stages, in the order Materialize goes through them.
const (
	StageResolve = "resolve" // manifest and config; 0/0
	StagePull    = "pull"    // layers downloaded and flattened; compressed bytes
	StageRootFS  = "rootfs"  // ext4 image built; 0/disk bytes, then disk/disk
	StageChunks  = "chunks"  // image chunked and missing chunks uploaded; 0/size, then size/size
)

// ProgressFunc is told how far Materialize is; total is 0 when unknown. It is called
// from the materializing goroutine and must not block for long.
type ProgressFunc func(stage string, done, total int64)

// ChunkStore uploads a file's missing chunks (chunk.Store does).
type ChunkStore interface {
	PutFile(ctx context.Context, path string) (chunk.Manifest, chunk.PutStats, error)
}

// TreeImager builds a deterministic ext4 image from a tree (vmimage.Builder does).
type TreeImager interface {
	TreeImage(ctx context.Context, spec vmimage.TreeImageSpec) error
}

// DefaultDiskGiB is the root disk size when neither the request nor Config gives one.
const DefaultDiskGiB = 4

// rootFSSeed seeds every image root filesystem's UUID and directory hash seed. It is
// one constant, not the digest or the repository, so the same tree gives the same bytes
// whatever it was pulled as, and a rebuilt image shares the metadata checksums (seeded
// by the UUID) of everything it did not change. Changing it changes every image's bytes.
const rootFSSeed = "engrams-image-rootfs-v1"

// Config tunes a Materializer.
type Config struct {
	// WorkDir holds one temporary directory per call (tree and ext4 image; 0700),
	// removed before the call returns. Required; it should have room for both, and
	// be private to this user (checkWorkDir: a real directory, this user's, writable
	// by no one else), checked by New and by every call.
	WorkDir string
	// DefaultDiskGiB is the root disk size when Request.DiskGiB is 0 (default DefaultDiskGiB).
	DefaultDiskGiB int
	// StaleAfter: New removes work directories older than this that a killed
	// process left in WorkDir (default StaleWorkAfter). Replicas may share
	// WorkDir: keep it longer than any materialization can take.
	StaleAfter time.Duration
}

// StaleWorkAfter is the default Config.StaleAfter.
const StaleWorkAfter = 6 * time.Hour

// Deps are a Materializer's collaborators.
type Deps struct {
	Puller *oci.Puller // required
	Imager TreeImager  // required
	Chunks ChunkStore  // required; use a DiskChunkSize store
	Logger *slog.Logger
}

// Materializer turns image references into chunked root filesystems. Safe for
// concurrent use if its Deps are.
type Materializer struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
}

// New validates cfg and deps.
func New(cfg Config, deps Deps) (*Materializer, error) {
	switch {
	case cfg.WorkDir == "":
		return nil, errors.New("new materializer: Config.WorkDir is required")
	case cfg.DefaultDiskGiB < 0:
		return nil, errors.New("new materializer: Config.DefaultDiskGiB is negative")
	case deps.Puller == nil || deps.Imager == nil || deps.Chunks == nil:
		return nil, errors.New("new materializer: Deps.Puller, Imager and Chunks are required")
	}
	if cfg.DefaultDiskGiB == 0 {
		cfg.DefaultDiskGiB = DefaultDiskGiB
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = StaleWorkAfter
	}
	if err := checkWorkDir(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("new materializer: %w", err)
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Materializer{cfg: cfg, deps: deps, log: log}
	m.sweep(time.Now())
	return m, nil
}

// sweep removes the work directories a killed process left in WorkDir:
// those older than StaleAfter. Failures are logged; they cost only disk.
func (m *Materializer) sweep(now time.Time) {
	ents, err := os.ReadDir(m.cfg.WorkDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), workPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || now.Sub(info.ModTime()) < m.cfg.StaleAfter {
			continue
		}
		dir := filepath.Join(m.cfg.WorkDir, e.Name())
		if err := oci.RemoveTree(dir); err != nil {
			m.log.Warn("remove stale materialize work dir", "dir", dir, "err", err)
			continue
		}
		m.log.Info("removed a stale materialize work dir", "dir", dir, "age", now.Sub(info.ModTime()).Round(time.Minute))
	}
}

// workPrefix names Materialize's work directories.
const workPrefix = "materialize-"

// Request says which image to materialize.
type Request struct {
	Ref      string // tag or digest reference
	Auth     oci.Credentials
	DiskGiB  int          // root disk size; 0 means Config.DefaultDiskGiB
	Progress ProgressFunc // optional
}

// Result is a materialized image.
type Result struct {
	Repository      string          // e.g. "registry.example.com/team/app"
	Digest          string          // linux/amd64 manifest digest, "sha256:…"
	Config          oci.ImageConfig // what the image says about running it
	RootFS          chunk.Manifest  // the root filesystem image, chunked
	CompressedBytes int64           // layer bytes downloaded
	TreeBytes       int64           // file bytes in the flattened tree
	DiskBytes       int64           // virtual size of the root filesystem image
	Upload          chunk.PutStats  // chunks present, uploaded, bytes uploaded
	Libc            string          // glibc, musl or none: the dynamic loaders the tree has (Libc* constants)
	// Warnings say what the root filesystem left out of the image (its device nodes
	// and FIFOs, oci.LeftOutWarning); nil when nothing.
	Warnings []string
}

// C libraries an image may provide, by the dynamic loader found in its tree.
const (
	LibcGlibc = "glibc"
	LibcMusl  = "musl"
	LibcNone  = "none" // no x86-64 loader: only static programs run
)

// findLibc names the C library whose x86-64 dynamic loader dir's tree has
// (glibc wins when both are there), looking as the guest would (/lib64 may be a
// symlink, even an absolute one), never outside the tree.
func findLibc(dir string) string {
	for _, c := range []struct{ path, libc string }{
		{"lib64/ld-linux-x86-64.so.2", LibcGlibc},
		{"lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", LibcGlibc},
		{"usr/lib64/ld-linux-x86-64.so.2", LibcGlibc},
		{"usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", LibcGlibc},
		{"lib/ld-musl-x86_64.so.1", LibcMusl},
		{"usr/lib/ld-musl-x86_64.so.1", LibcMusl},
	} {
		if _, err := oci.LstatInRoot(dir, c.path); err == nil {
			return c.libc
		}
	}
	return LibcNone
}

// Pinned is the reference by digest.
func (r Result) Pinned() string { return r.Repository + "@" + r.Digest }

// Resolve fetches ref's linux/amd64 manifest and config without pulling layers.
func (m *Materializer) Resolve(ctx context.Context, ref string, auth oci.Credentials) (oci.Resolved, error) {
	return m.deps.Puller.Resolve(ctx, ref, auth)
}

// Materialize resolves req.Ref, pulls its linux/amd64 image pinned by digest (refusing
// one without /bin/sh with oci.ErrNoShell), builds its ext4 root filesystem (a tree
// larger than the disk fails with vmimage.ErrTreeTooLarge) and puts it into the chunk
// store. The filesystem is seeded by a constant and populated in the image's layer
// order (oci.Image.Order), so the same tree and disk size give the same manifest, and
// an image rebuilt with a changed top layer shares the chunks of what its lower layers
// brought. Its working directory is removed whatever happens.
func (m *Materializer) Materialize(ctx context.Context, req Request) (Result, error) {
	gib := req.DiskGiB
	if gib == 0 {
		gib = m.cfg.DefaultDiskGiB
	}
	if gib < 0 {
		return Result{}, fmt.Errorf("materialize %s: disk size %d GiB is negative", req.Ref, gib)
	}
	progress := req.Progress
	if progress == nil {
		progress = func(string, int64, int64) {}
	}
	progress(StageResolve, 0, 0)
	res, err := m.deps.Puller.Resolve(ctx, req.Ref, req.Auth)
	if err != nil {
		return Result{}, fmt.Errorf("materialize %s: %w", req.Ref, err)
	}
	work, err := makeWorkDir(m.cfg.WorkDir)
	if err != nil {
		return Result{}, fmt.Errorf("materialize %s: %w", res.Pinned(), err)
	}
	defer func() {
		if rerr := oci.RemoveTree(work); rerr != nil {
			m.log.Warn("remove materialize work dir", "dir", work, "err", rerr)
		}
	}()
	out, err := m.build(ctx, work, res, req, int64(gib)<<30, progress)
	if err != nil {
		return Result{}, fmt.Errorf("materialize %s: %w", res.Pinned(), err)
	}
	m.log.Info("image materialized", "image", out.Pinned(), "tree_bytes", out.TreeBytes,
		"disk_bytes", out.DiskBytes, "chunks", out.Upload.Chunks, "uploaded", out.Upload.Uploaded,
		"uploaded_bytes", out.Upload.UploadedBytes)
	return out, nil
}

// build pulls, images and chunks res inside work.
func (m *Materializer) build(ctx context.Context, work string, res oci.Resolved, req Request, disk int64, progress ProgressFunc) (Result, error) {
	img, err := m.deps.Puller.Pull(ctx, oci.Request{
		Ref: res.Pinned(), Auth: req.Auth, Target: filepath.Join(work, "tree"), RequireShell: true,
		Progress: func(stage string, done, total int64) {
			if stage == oci.StagePull {
				progress(StagePull, done, total)
			}
		},
		Limits: oci.TreeLimits(disk),
	})
	if err != nil {
		return Result{}, diskHint(err, disk)
	}
	if err := img.RequireShell(); err != nil {
		return Result{}, err
	}
	out := Result{
		Repository: img.Repository, Digest: img.Digest, Config: img.Config,
		CompressedBytes: img.CompressedBytes(), TreeBytes: img.TreeBytes, DiskBytes: disk,
		Libc: findLibc(img.Dir),
	}
	if w := oci.LeftOutWarning(img.LeftOut); w != "" {
		out.Warnings = []string{w}
	}
	if img.TreeBytes >= disk {
		return Result{}, tooLarge(img.TreeBytes, disk, vmimage.ErrTreeTooLarge)
	}
	progress(StageRootFS, 0, disk)
	path := filepath.Join(work, "rootfs.ext4")
	err = m.deps.Imager.TreeImage(ctx, vmimage.TreeImageSpec{
		Dir: img.Dir, Path: path, SizeBytes: disk, Seed: rootFSSeed, Order: img.Order,
	})
	if errors.Is(err, vmimage.ErrTreeTooLarge) {
		return Result{}, tooLarge(img.TreeBytes, disk, err)
	}
	if err != nil {
		return Result{}, fmt.Errorf("build root filesystem: %w", err)
	}
	progress(StageRootFS, disk, disk)
	// The tree is no longer needed: free its space before chunking.
	if err := oci.RemoveTree(img.Dir); err != nil {
		return Result{}, fmt.Errorf("remove image tree: %w", err)
	}
	progress(StageChunks, 0, disk)
	man, st, err := m.deps.Chunks.PutFile(ctx, path)
	if err != nil {
		return Result{}, fmt.Errorf("chunk root filesystem: %w", err)
	}
	progress(StageChunks, disk, disk)
	out.RootFS, out.Upload = man, st
	return out, nil
}

// diskHint adds what to do to a pull stopped by a bound the root disk sets.
func diskHint(err error, disk int64) error {
	var lerr *oci.LimitError
	if errors.As(err, &lerr) && (lerr.Limit == "TreeBytes" || lerr.Limit == "Inodes") {
		return fmt.Errorf("%w (all a %d GiB root disk has room for; enable the image with a larger --disk)", err, disk>>30)
	}
	return err
}

// tooLarge says the tree does not fit and what to do; err wraps vmimage.ErrTreeTooLarge.
func tooLarge(tree, disk int64, err error) error {
	return fmt.Errorf("image tree (%d MiB of files) does not fit a %d GiB root disk; enable it with a larger disk: %w",
		tree>>20, disk>>30, err)
}
