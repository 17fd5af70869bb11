package process

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// writeTar archives the tree at src (directories, regular files, symlinks,
// with permission bits and modification times; other types are skipped)
// into the file dst, with names relative to src: the archive never names
// the directory it came from. dst is written atomically and fsynced.
func writeTar(src, dst string) (err error) {
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	tw := tar.NewWriter(f)
	if err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return addTarEntry(tw, src, p, d)
	}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func addTarEntry(tw *tar.Writer, src, p string, d fs.DirEntry) error {
	rel, err := filepath.Rel(src, p)
	if err != nil || rel == "." {
		return err
	}
	info, err := d.Info()
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var link string
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	case !info.IsDir() && !info.Mode().IsRegular():
		return nil // sockets, FIFOs, devices
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return err
	}
	hdr.Name = filepath.ToSlash(rel)
	if info.IsDir() {
		hdr.Name += "/"
	}
	hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
	if !info.Mode().IsRegular() {
		return tw.WriteHeader(hdr)
	}
	in, err := os.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, in, hdr.Size); err != nil {
		return fmt.Errorf("archive %s: %w", rel, err)
	}
	return nil
}

// extractTar unpacks an archive written by writeTar into dst.
func extractTar(src, dst string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	tr := tar.NewReader(f)
	var dirs []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", src, err)
		}
		if !filepath.IsLocal(hdr.Name) {
			return fmt.Errorf("read %s: entry %q escapes the root", src, hdr.Name)
		}
		if err := extractEntry(tr, hdr, filepath.Join(dst, hdr.Name)); err != nil {
			return fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, hdr)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // after their contents were written
		p := filepath.Join(dst, dirs[i].Name)
		_ = os.Chtimes(p, time.Time{}, dirs[i].ModTime)
	}
	return nil
}

func extractEntry(tr *tar.Reader, hdr *tar.Header, p string) error {
	mode := fs.FileMode(hdr.Mode).Perm()
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(p, mode|0o700); err != nil {
			return err
		}
		return os.Chmod(p, mode|0o700)
	case tar.TypeSymlink:
		return os.Symlink(hdr.Linkname, p)
	case tar.TypeReg:
		out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, tr); err != nil {
			_ = out.Close()
			return err
		}
		if err := out.Close(); err != nil {
			return err
		}
		return os.Chtimes(p, time.Time{}, hdr.ModTime)
	}
	return nil // types writeTar never writes
}
