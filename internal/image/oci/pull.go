package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Progress stages, in the order a pull goes through them.
const (
	StageResolve = "resolve" // manifest and config; bytes 0/0
	StagePull    = "pull"    // layers downloaded, verified and applied; compressed bytes
	StageFinish  = "finish"  // directory metadata, the /bin/sh check, the rename; 0/0
)

// ProgressFunc is told how far a pull is. It is called from the pulling goroutine
// (so it must not block for long) at every stage change, then about every MiB of layer
// bytes, and with done == total when the last layer is read.
type ProgressFunc func(stage string, done, total int64)

// Request says what to pull and where to.
type Request struct {
	Ref  string // e.g. "registry.example.com/team/app:v1" or "…@sha256:…"
	Auth Credentials
	// Target is the directory the flattened tree becomes. It must not exist; its parent
	// must, on the filesystem where the temporary tree is built beside it.
	Target string
	// RequireShell refuses, with ErrNoShell, an image without an executable /bin/sh,
	// before the tree is renamed into place.
	RequireShell bool
	Progress     ProgressFunc // optional
	// Limits override the Puller's (Config.Limits) field by field where not zero:
	// the root disk's bounds (TreeLimits) for one pull.
	Limits Limits
}

// Image is a pulled, flattened image.
type Image struct {
	Resolved
	Dir       string // the flattened tree (Request.Target, absolute)
	TreeBytes int64  // file bytes written
	HasShell  bool   // an executable /bin/sh exists, symlinks followed inside the root
	// LeftOut lists, by name, the device nodes and FIFOs the image has and the tree
	// does not (LeftOutWarning says it in a line).
	LeftOut []LeftOut
	// Order lists every entry of the tree but its root ("etc", "etc/passwd"; slash
	// separated, relative to Dir) by the layer that created it, then by name, every
	// directory before what it holds (see tree.order). Building a file system in this
	// order allocates what lower layers brought first and the same way whatever layers
	// sit above them, so a rebuilt image with a changed top layer differs only where
	// that layer's entries land.
	Order []string
}

// errNoShell says why the image is refused.
func errNoShell() error {
	return fmt.Errorf("%w (images must be Linux with an executable /bin/sh)", ErrNoShell)
}

// RequireShell returns an ErrNoShell error if the image has no /bin/sh.
func (i *Image) RequireShell() error {
	if !i.HasShell {
		return fmt.Errorf("image %s: %w", i.Pinned(), errNoShell())
	}
	return nil
}

// Pull resolves req.Ref to its linux/amd64 image and flattens its layers into
// req.Target. The tree is built in a temporary directory beside the target and renamed
// into place only on success; on any error the temporary directory is removed and the
// target does not exist.
func (p *Puller) Pull(ctx context.Context, req Request) (*Image, error) {
	target, err := filepath.Abs(req.Target)
	if err != nil || req.Target == "" {
		return nil, fmt.Errorf("pull %s: target %q: not a usable path", req.Ref, req.Target)
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		if err == nil {
			err = fs.ErrExist
		}
		return nil, fmt.Errorf("pull %s: target %s: %w", req.Ref, target, err)
	}
	prog := &progress{fn: req.Progress}
	prog.stage(StageResolve, 0, 0)
	res, img, err := p.resolve(ctx, req.Ref, req.Auth)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(target), "."+filepath.Base(target)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", res.Pinned(), err)
	}
	out, err := p.build(ctx, tmp, res, img, req, prog)
	if err == nil {
		err = renameNoReplace(tmp, target)
	}
	if err != nil {
		if rerr := RemoveTree(tmp); rerr != nil {
			p.log.Warn("remove partial image tree", "dir", tmp, "err", rerr)
		}
		return nil, fmt.Errorf("pull %s: %w", res.Pinned(), err)
	}
	out.Dir = target
	p.log.Info("image pulled", "image", res.Pinned(), "layers", len(res.Layers),
		"compressed_bytes", res.CompressedBytes(), "tree_bytes", out.TreeBytes, "has_shell", out.HasShell)
	return out, nil
}

// build flattens every layer into dir and checks the result.
func (p *Puller) build(ctx context.Context, dir string, res Resolved, img v1.Image, req Request, prog *progress) (*Image, error) {
	m := newMeter(p.cfg.Limits.Over(req.Limits))
	if err := checkPacked(res, m.lim); err != nil {
		return nil, err
	}
	t, err := newTree(dir, p.cfg, m)
	if err != nil {
		return nil, err
	}
	defer t.close()
	prog.stage(StagePull, 0, res.CompressedBytes())
	for i, l := range res.Layers {
		if err := p.applyLayer(ctx, t, i, img, l, prog); err != nil {
			return nil, fmt.Errorf("layer %d/%d %s: %w", i+1, len(res.Layers), l.Digest, err)
		}
		p.log.Debug("layer applied", "image", res.Pinned(), "layer", l.Digest, "index", i+1, "bytes", l.Size)
	}
	prog.stage(StageFinish, 0, 0)
	if err := t.finish(); err != nil {
		return nil, err
	}
	order, err := t.order()
	if err != nil {
		return nil, err
	}
	has, err := HasShell(dir)
	if err != nil {
		return nil, err
	}
	out := &Image{Resolved: res, TreeBytes: m.tree, HasShell: has, Order: order, LeftOut: t.leftOut}
	if req.RequireShell && !has {
		return nil, errNoShell()
	}
	return out, nil
}

// checkPacked refuses, before any layer is fetched, layers whose declared sizes
// could not hold a stream within lim.StreamBytes (compression adds at most 1/256
// to incompressible bytes), and more of them than lim.Layers.
func checkPacked(res Resolved, lim Limits) error {
	if len(res.Layers) > lim.Layers {
		return &LimitError{Limit: "Layers", Max: int64(lim.Layers),
			msg: fmt.Sprintf("%d layers, more than %d", len(res.Layers), lim.Layers)}
	}
	if packed, most := res.CompressedBytes(), lim.StreamBytes+lim.StreamBytes/256; packed > most {
		return &LimitError{Limit: "StreamBytes", Max: lim.StreamBytes, msg: fmt.Sprintf(
			"the layers are %d bytes compressed, more than a stream of at most %d bytes uncompressed can be", packed, lim.StreamBytes)}
	}
	return nil
}

// applyLayer streams layer number index's blob into the tree and verifies it. Whatever
// goes wrong, the rest of the blob is read and its digest checked, so corrupt bytes are
// reported as ErrCorruptLayer even when they first show up as a broken or odd-looking
// tar stream; but a pull stopped by a bound stops there (the rest of the blob may be
// what the bound is about).
func (p *Puller) applyLayer(ctx context.Context, t *tree, index int, img v1.Image, l Layer, prog *progress) error {
	digest, err := v1.NewHash(l.Digest)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptLayer, err)
	}
	diffID, err := v1.NewHash(l.DiffID)
	if err != nil {
		return fmt.Errorf("%w: diff_id: %v", ErrCorruptLayer, err)
	}
	layer, err := img.LayerByDigest(digest)
	if err != nil {
		p.logDetail(l.Digest, err)
		return classify(err)
	}
	rc, err := layer.Compressed()
	if err != nil {
		p.logDetail(l.Digest, err)
		return fmt.Errorf("download: %w", classifyBlobOpen(err))
	}
	defer rc.Close()
	br := &blobReader{r: rc, h: sha256.New(), prog: prog}
	t.m.blob = br
	defer t.m.endLayer()
	applyErr := t.applyLayer(ctx, index, br, diffID)
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(applyErr, ErrTooLarge) {
		return applyErr
	}
	_, _ = io.Copy(io.Discard, br) // to the end, so the digest covers the whole blob
	if err := br.verify(l); err != nil {
		return err
	}
	return applyErr
}

// blobReader hashes and counts a layer's compressed bytes as they are read.
type blobReader struct {
	r    io.Reader
	h    hash.Hash
	n    int64
	err  error // the first read error other than io.EOF
	prog *progress
}

func (b *blobReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.h.Write(p[:n])
	b.n += int64(n)
	b.prog.add(int64(n))
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

// verify judges the blob once read to its end (or to a failure).
func (b *blobReader) verify(l Layer) error {
	if b.n == l.Size {
		if got := "sha256:" + hex.EncodeToString(b.h.Sum(nil)); got != l.Digest {
			return fmt.Errorf("%w: blob digest is %s, the manifest says %s", ErrCorruptLayer, got, l.Digest)
		}
		return nil
	}
	if b.err != nil && isTransfer(b.err) {
		return fmt.Errorf("download: %w", b.err)
	}
	if b.err != nil {
		return fmt.Errorf("%w: %d of %d bytes read: %v", ErrCorruptLayer, b.n, l.Size, b.err)
	}
	return fmt.Errorf("%w: blob is %d bytes, the manifest says %d", ErrCorruptLayer, b.n, l.Size)
}

// progressStep is how many bytes pass between two ProgressFunc calls.
const progressStep = 1 << 20

type progress struct {
	fn                ProgressFunc
	done, total, last int64
}

func (p *progress) stage(s string, done, total int64) {
	p.done, p.total, p.last = done, total, done
	if p.fn != nil {
		p.fn(s, done, total)
	}
}

func (p *progress) add(n int64) {
	if n == 0 {
		return
	}
	p.done += n
	if p.fn != nil && (p.done-p.last >= progressStep || p.done == p.total) {
		p.last = p.done
		p.fn(StagePull, p.done, p.total)
	}
}

// RemoveTree removes dir even if the tree holds directories without write
// permission (a non-root caller cannot otherwise remove their entries), as
// an image tree may. Neither step follows a symlink in the tree (os.RemoveAll
// removes links, the chmods go through an os.Root of dir).
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	if root, err := os.OpenRoot(dir); err == nil {
		_ = fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = root.Chmod(p, 0o700)
			}
			return nil
		})
		_ = root.Close()
	}
	return os.RemoveAll(dir)
}
