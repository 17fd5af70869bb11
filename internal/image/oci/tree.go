package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Whiteout names (OCI image spec, "Whiteouts").
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// meta is a directory's final metadata, applied once every layer is in (writing into a
// directory changes its mtime, and a read-only mode would stop a non-root writer).
type meta struct {
	mode     fs.FileMode
	mtime    time.Time
	uid, gid int
}

// implicitDir is the metadata of a directory no tar entry described: fixed, so the
// same image always gives the same tree.
var implicitDir = meta{mode: fs.ModeDir | 0o755, mtime: time.Unix(0, 0)}

// tree is a directory tree layers are applied to, in order. Every operation goes
// through an os.Root (no path resolves outside dir) and, before it, through explicit
// checks that name the offending entry: no "..", no absolute names, no write through a
// symlink, no link leaving the root; device nodes and FIFOs are never created. What
// it writes, reads and keeps is counted against the pull's Limits (m).
type tree struct {
	dir  string
	root *os.Root
	cfg  Config
	m    *meter

	// left holds the names standing for device nodes and FIFOs (empty placeholder
	// files, see leaveOut) by kind; leftOut lists those finish removed.
	left    map[string]string
	leftOut []LeftOut

	dirs map[string]meta // every directory created or described, by name ("." is the root)
	real map[string]bool // names known to be real directories (not symlinks); reset on removals

	// The current layer: its index, the names it wrote and their ancestors. Whiteouts in
	// a layer hide only what lower layers put there (OCI image spec).
	layer     int
	written   map[string]bool
	ancestors map[string]bool

	// created is, for every name ever created, the index of the layer that created what
	// is there now: a file, symlink or hard link is created by every write of it, a
	// directory only when it appears or is re-created (replacing a non-directory, after
	// a whiteout, or emptied by an opaque whiteout), not when a layer re-describes it.
	// Names removed later keep stale entries; only names still in the tree are read.
	created map[string]int
}

func newTree(dir string, cfg Config, m *meter) (*tree, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &tree{
		dir: dir, root: root, cfg: cfg, m: m, left: map[string]string{},
		dirs:    map[string]meta{".": implicitDir},
		real:    map[string]bool{".": true},
		created: map[string]int{},
	}, nil
}

func (t *tree) close() { _ = t.root.Close() }

// applyLayer reads layer number index's (possibly compressed) tar stream into the tree,
// then checks the uncompressed bytes against the config's diff_id.
func (t *tree) applyLayer(ctx context.Context, index int, r io.Reader, diffID v1.Hash) error {
	dr, done, err := decompress(bufio.NewReaderSize(r, 64<<10))
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorruptLayer, err)
	}
	defer done()
	uh := sha256.New()
	tee := io.TeeReader(countedReader{r: dr, m: t.m}, uh)
	tr := tar.NewReader(tee)
	t.layer, t.written, t.ancestors = index, map[string]bool{}, map[string]bool{}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return t.readErr("read tar", err)
		}
		if err := t.m.entry(hdr); err != nil {
			return err
		}
		if err := t.apply(hdr, tr); err != nil {
			return t.readErr("", err)
		}
	}
	// The rest: tar padding, and the compressor's trailer with its checksum (counted:
	// a bomb may hide its zeros after the end of the archive).
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return t.readErr("read layer", err)
	}
	if got := "sha256:" + hex.EncodeToString(uh.Sum(nil)); got != diffID.String() {
		return fmt.Errorf("%w: uncompressed digest is %s, the config's diff_id says %s",
			ErrCorruptLayer, got, diffID)
	}
	return nil
}

// readErr is the error of a failed read or entry: the bound the meter saw passed
// (readers in between may have wrapped or replaced it), else err, as corruption when
// it is a failed read (what says it).
func (t *tree) readErr(what string, err error) error {
	switch {
	case t.m.err != nil:
		return t.m.err
	case what == "":
		return err
	}
	return fmt.Errorf("%w: %s: %v", ErrCorruptLayer, what, err)
}

var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// zstdMaxWindow bounds the memory a zstd frame can make the decoder take: 128 MiB,
// the window of zstd --long=27, the largest common tools write.
const zstdMaxWindow = 128 << 20

// decompress detects gzip and zstd by their magic bytes (media types are not always
// honest); anything else is read as a plain tar.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, func() { _ = zr.Close() }, nil
	case bytes.Equal(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxWindow(zstdMaxWindow), zstd.WithDecoderMaxMemory(zstdMaxWindow))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// apply applies one tar entry.
func (t *tree) apply(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if base := path.Base(name); strings.HasPrefix(base, whiteoutPrefix) {
		return t.whiteout(name, base)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = t.mkdir(name, hdr)
	case tar.TypeReg:
		err = t.file(name, hdr, r)
	case tar.TypeSymlink:
		err = t.symlink(name, hdr)
	case tar.TypeLink:
		err = t.hardlink(name, hdr)
	case tar.TypeChar:
		err = t.leaveOut(name, hdr, LeftOutCharDevice)
	case tar.TypeBlock:
		err = t.leaveOut(name, hdr, LeftOutBlockDevice)
	case tar.TypeFifo:
		err = t.leaveOut(name, hdr, LeftOutFIFO)
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return unsafeEntry(hdr.Name, "has the unsupported type %q", hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	t.markWritten(name)
	return nil
}

// cleanName refuses absolute names, any ".." component and line breaks (which no
// root filesystem build script can express), and cleans the rest ("./usr/" → "usr",
// "./" → ".").
func cleanName(raw string) (string, error) {
	if raw == "" {
		return "", unsafeEntry(raw, "has an empty name")
	}
	if strings.ContainsAny(raw, "\n\r") {
		return "", unsafeEntry(raw, "has a line break in its name")
	}
	if strings.HasPrefix(raw, "/") {
		return "", unsafeEntry(raw, "has an absolute name")
	}
	for _, c := range strings.Split(raw, "/") {
		if c == ".." {
			return "", unsafeEntry(raw, "has a \"..\" component (path traversal)")
		}
	}
	return path.Clean(raw), nil
}

func (t *tree) markWritten(name string) {
	t.written[name] = true
	for d := path.Dir(name); d != "."; d = path.Dir(d) {
		t.ancestors[d] = true
	}
}

// parents makes sure every ancestor of name is a real directory, creating missing ones
// when create is set. It refuses a symlink among them: a write through it could land
// anywhere. Without create, it reports false if an ancestor is missing or not a
// directory (so nothing below it can exist).
func (t *tree) parents(entry, name string, create bool) (bool, error) {
	dir := path.Dir(name)
	if t.real[dir] {
		return true, nil
	}
	var prefix string
	for _, c := range strings.Split(dir, "/") {
		prefix = path.Join(prefix, c)
		if t.real[prefix] {
			continue
		}
		fi, err := t.root.Lstat(prefix)
		switch {
		case errors.Is(err, fs.ErrNotExist) && create:
			if err := t.m.addInode(); err != nil {
				return false, err
			}
			if err := t.root.Mkdir(prefix, 0o700); err != nil {
				return false, fmt.Errorf("entry %q: %w", entry, err)
			}
			t.dirs[prefix] = implicitDir
			t.created[prefix] = t.layer
		case errors.Is(err, fs.ErrNotExist):
			return false, nil
		case err != nil:
			return false, fmt.Errorf("entry %q: %w", entry, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return false, unsafeEntry(entry, "would be written through the symlink %q", prefix)
		case !fi.IsDir() && create:
			return false, unsafeEntry(entry, "has a parent %q that is not a directory", prefix)
		case !fi.IsDir():
			return false, nil
		}
		t.real[prefix] = true
	}
	return true, nil
}

// clear removes whatever is at name (nothing if absent), and forgets it.
func (t *tree) clear(name string) error {
	fi, err := t.root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if err := t.forgetUnder(name); err != nil {
			return err
		}
		t.real = map[string]bool{".": true}
		return t.root.RemoveAll(name)
	}
	t.forget(name, fi)
	return t.root.Remove(name)
}

// forget uncounts the entry at name, about to be removed: its inode unless another
// name still links to it, and its placeholder if it is one.
func (t *tree) forget(name string, fi fs.FileInfo) {
	delete(t.left, name)
	if st, ok := fi.Sys().(*syscall.Stat_t); fi.IsDir() || !ok || st.Nlink <= 1 {
		t.m.inodes--
	}
}

// forgetUnder forgets dir and everything below it, about to be removed. (Two names
// of one inode both below dir keep it counted: the count errs high, never low.)
func (t *tree) forgetUnder(dir string) error {
	return fs.WalkDir(t.root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		t.forget(p, fi)
		return nil
	})
}

func (t *tree) mkdir(name string, hdr *tar.Header) error {
	m := meta{mode: hdr.FileInfo().Mode(), mtime: hdr.ModTime, uid: hdr.Uid, gid: hdr.Gid}
	if name != "." {
		if _, err := t.parents(hdr.Name, name, true); err != nil {
			return err
		}
		fi, err := t.root.Lstat(name)
		if err != nil || !fi.IsDir() {
			if err := t.clear(name); err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
			if err := t.m.addInode(); err != nil {
				return err
			}
			if err := t.root.Mkdir(name, 0o700); err != nil {
				return fmt.Errorf("entry %q: %w", hdr.Name, err)
			}
			t.created[name] = t.layer
		}
		t.real[name] = true
	}
	t.dirs[name] = m
	if err := t.own(name, hdr); err != nil {
		return err
	}
	return t.xattrs(name, hdr)
}

// create makes the plain file of entry hdr at name in place of what was
// there, counted against the tree's inodes and owned by this layer.
func (t *tree) create(name string, hdr *tar.Header) (*os.File, error) {
	if err := t.replace(hdr.Name, name); err != nil {
		return nil, err
	}
	if err := t.m.addInode(); err != nil {
		return nil, err
	}
	f, err := t.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	t.created[name] = t.layer
	return f, nil
}

func (t *tree) file(name string, hdr *tar.Header, r io.Reader) error {
	if name == "." {
		return unsafeEntry(hdr.Name, "would replace the root directory")
	}
	if err := t.m.wantTree(hdr.Name, hdr.Size); err != nil {
		return err
	}
	f, err := t.create(name, hdr)
	if err != nil {
		return err
	}
	_, err = io.Copy(treeWriter{w: f, m: t.m, name: hdr.Name}, tarReader{r})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	if err := t.own(name, hdr); err != nil {
		return err
	}
	if err := t.root.Chmod(name, hdr.FileInfo().Mode()); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	if err := t.xattrs(name, hdr); err != nil {
		return err
	}
	if err := t.root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	return nil
}

// tarReader marks read errors inside an entry's content as corruption.
type tarReader struct{ r io.Reader }

func (tr tarReader) Read(p []byte) (int, error) {
	n, err := tr.r.Read(p)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: read entry: %v", ErrCorruptLayer, err)
	}
	return n, err
}

// replace readies name for a new non-directory entry: real parent directories, and
// nothing left at name itself (a new file never opens an old one, which could be a
// symlink or another name of a hard-linked file).
func (t *tree) replace(entry, name string) error {
	if _, err := t.parents(entry, name, true); err != nil {
		return err
	}
	if err := t.clear(name); err != nil {
		return fmt.Errorf("entry %q: %w", entry, err)
	}
	return nil
}

// symlink creates a symlink. Its target is resolved the way the guest will see it: an
// absolute target is relative to the image root (Alpine's /bin/sh -> /bin/busybox), so
// it cannot leave it; a relative one must not climb above the root.
func (t *tree) symlink(name string, hdr *tar.Header) error {
	target := hdr.Linkname
	switch {
	case name == ".":
		return unsafeEntry(hdr.Name, "would replace the root directory")
	case target == "":
		return unsafeEntry(hdr.Name, "is a symlink with an empty target")
	case strings.ContainsAny(target, "\n\r"):
		return unsafeEntry(hdr.Name, "is a symlink to a target with a line break")
	case !path.IsAbs(target):
		if j := path.Join(path.Dir(name), target); j == ".." || strings.HasPrefix(j, "../") {
			return unsafeEntry(hdr.Name, "is a symlink to %q, outside the root", target)
		}
	}
	if err := t.replace(hdr.Name, name); err != nil {
		return err
	}
	if err := t.m.addInode(); err != nil {
		return err
	}
	if err := t.root.Symlink(target, name); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	t.created[name] = t.layer
	if err := t.own(name, hdr); err != nil {
		return err
	}
	if err := lutimes(filepath.Join(t.dir, name), hdr.ModTime); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	return nil
}

// hardlink links name to an earlier entry. The target must be inside the root, reached
// without symlinks, and not a directory; the new name shares its inode and metadata.
func (t *tree) hardlink(name string, hdr *tar.Header) error {
	if name == "." {
		return unsafeEntry(hdr.Name, "would replace the root directory")
	}
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return unsafeEntry(hdr.Name, "is a hard link to %q, outside the root", hdr.Linkname)
	}
	if target == "." || target == name {
		return unsafeEntry(hdr.Name, "is a hard link to %q", hdr.Linkname)
	}
	ok, err := t.parents(hdr.Name, target, false)
	if err != nil {
		return err
	}
	fi, err := t.root.Lstat(target)
	switch {
	case !ok || errors.Is(err, fs.ErrNotExist):
		return unsafeEntry(hdr.Name, "is a hard link to %q, which does not exist", hdr.Linkname)
	case err != nil:
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	case fi.IsDir():
		return unsafeEntry(hdr.Name, "is a hard link to the directory %q", hdr.Linkname)
	}
	if kind, ok := t.left[target]; ok {
		return t.leaveOut(name, hdr, kind) // another name of a device node or FIFO
	}
	if err := t.replace(hdr.Name, name); err != nil {
		return err
	}
	if err := t.root.Link(target, name); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	t.created[name] = t.layer
	return nil
}
