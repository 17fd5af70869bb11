package snapshots

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/chunk"
)

// dirSuffix ends the Manifest.Name of a snapshot "file" that is a
// directory (the process backend's disk is one): its chunks hold a PAX tar
// stream of the tree (regular files, directories, symlinks).
const dirSuffix = "/"

// putSnapshotFile chunks one file (or directory) a backend wrote, streaming;
// a file with a parent (its previous version's manifest, if it has chunks)
// stores its changed chunks as deltas over it.
func putSnapshotFile(ctx context.Context, store ChunkStore, p string, parent chunk.Manifest) (chunk.Manifest, chunk.PutStats, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return chunk.Manifest{}, chunk.PutStats{}, fmt.Errorf("chunk snapshot file: %w", err)
	}
	if !fi.IsDir() {
		put := store.PutFile
		if len(parent.Chunks) > 0 {
			put = func(ctx context.Context, p string) (chunk.Manifest, chunk.PutStats, error) {
				return store.PutFileOver(ctx, p, parent)
			}
		}
		m, st, err := put(ctx, p)
		m.Name = filepath.Base(p)
		return m, st, err
	}
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := writeTar(ctx, pw, p)
		_ = pw.CloseWithError(err)
		werr <- err
	}()
	m, st, err := store.PutReader(ctx, pr, -1)
	_ = pr.CloseWithError(errors.New("upload ended")) // stops a writer still running
	if wErr := <-werr; err == nil && wErr != nil {
		err = wErr
	}
	if err != nil {
		return chunk.Manifest{}, st, fmt.Errorf("chunk snapshot directory %s: %w", p, err)
	}
	m.Name = filepath.Base(p) + dirSuffix
	return m, st, nil
}

// writeTar writes the tree at root as a tar stream. Sockets, FIFOs and
// devices are not kept.
func writeTar(ctx context.Context, w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		case !info.Mode().IsRegular() && !info.IsDir():
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Format = filepath.ToSlash(rel), tar.FormatPAX
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		return copyFileInto(tw, p, hdr.Size)
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", root, err)
	}
	return tw.Close()
}

func copyFileInto(w io.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(w, f, size); err != nil {
		return fmt.Errorf("copy %s: %w", p, err)
	}
	return nil
}

// restoreSnapshotFile writes the file (or directory) m describes to dst,
// every chunk verified.
func restoreSnapshotFile(ctx context.Context, store ChunkStore, m chunk.Manifest, dst string) error {
	if !strings.HasSuffix(m.Name, dirSuffix) {
		return store.Restore(ctx, m, dst)
	}
	archive := dst + ".tar"
	if err := store.Restore(ctx, m, archive); err != nil {
		return err
	}
	defer os.Remove(archive)
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("restore %s: %w", dst, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("restore %s: %w", dst, err)
	}
	if err := untar(ctx, f, dst, fi.Size()); err != nil {
		return fmt.Errorf("restore %s: %w", dst, err)
	}
	return nil
}

// untar extracts a tar stream into the new directory dst. Every path is
// resolved inside dst (os.Root): no entry, symlink or "..", can write
// outside it. The files it writes hold at most limit bytes in all: writeTar
// stores every byte of a file, so an archive never holds more data than its
// own size, and a sparse entry claiming more is refused.
func untar(ctx context.Context, r io.Reader, dst string, limit int64) error {
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirMode struct {
		name string
		hdr  *tar.Header
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := path.Clean(hdr.Name)
		if name == "." {
			continue
		}
		if !fs.ValidPath(name) {
			return fmt.Errorf("archive entry %q: not a path inside the directory", hdr.Name)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirMode{name, hdr})
		}
		if hdr.Typeflag == tar.TypeReg {
			if limit -= hdr.Size; hdr.Size < 0 || limit < 0 {
				return fmt.Errorf("archive entry %q: its files hold more bytes than the archive", hdr.Name)
			}
		}
		if err := extract(root, tr, name, hdr); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first: a read-only parent stays writable until then
		d := dirs[i]
		if err := root.Chmod(d.name, keptMode(d.hdr)); err != nil {
			return fmt.Errorf("extract %s: %w", d.name, err)
		}
		_ = root.Chtimes(d.name, d.hdr.ModTime, d.hdr.ModTime)
	}
	return nil
}

func keptMode(hdr *tar.Header) fs.FileMode {
	return hdr.FileInfo().Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
}

func extract(root *os.Root, tr *tar.Reader, name string, hdr *tar.Header) error {
	if dir := path.Dir(name); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeSymlink:
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeReg:
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := root.Chmod(name, keptMode(hdr)); err != nil {
			return err
		}
		return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil // other entry types are not kept
}
