package harnessreg

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
)

// Bounds on an uploaded harness tree.
const (
	maxUploadTreeBytes   = 4 << 30
	maxUploadTreeEntries = 200_000
	maxUploadPathBytes   = 1024
)

// unpackTree extracts a tar (or gzip-compressed tar) into dir, which it
// creates. Only directories, regular files and symlinks that stay inside
// the tree (resolved through each other) are accepted; paths leaving the
// tree, duplicates, entries under a file or symlink, hard links and special
// files are refused. Files get their permission bits (setuid, setgid and
// sticky dropped); symlinks are made last, so nothing is ever written
// through one.
func unpackTree(r io.Reader, dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	br := bufio.NewReader(r)
	var src io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("%w: the upload is not a valid gzip stream: %w", domain.ErrInvalid, err)
		}
		defer zr.Close()
		src = zr
	}
	u := unpacker{dir: dir, seen: map[string]byte{}}
	tr := tar.NewReader(src)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: the upload is not a valid tar: %w", domain.ErrInvalid, err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
	return u.finish()
}

type unpacker struct {
	dir     string
	seen    map[string]byte // clean path -> 'd', 'f' or 'l'
	entries int
	bytes   int64
	links   []treeLink
	modes   map[string]int64 // directory -> mode, applied at the end
}

// treeLink is a symlink of the tree, made once every entry is in.
type treeLink struct {
	name, dst, target string // clean path in the tree, path on disk, target
}

func (u *unpacker) entry(hdr *tar.Header, body io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := uploadPath(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%w: tar entry %q names the tree's root but is not a directory", domain.ErrInvalid, hdr.Name)
	}
	if u.entries++; u.entries > maxUploadTreeEntries {
		return fmt.Errorf("%w: the tree has more than %d entries", domain.ErrInvalid, maxUploadTreeEntries)
	}
	if _, dup := u.seen[name]; dup {
		return fmt.Errorf("%w: %s appears twice in the tar", domain.ErrInvalid, name)
	}
	if err := u.parents(name); err != nil {
		return err
	}
	dst := filepath.Join(u.dir, filepath.FromSlash(name))
	switch hdr.Typeflag {
	case tar.TypeDir:
		u.seen[name] = 'd'
		if u.modes == nil {
			u.modes = map[string]int64{}
		}
		u.modes[dst] = hdr.Mode
		return os.MkdirAll(dst, 0o700)
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old tars write TypeRegA
		u.seen[name] = 'f'
		return u.file(name, dst, hdr, body)
	case tar.TypeSymlink:
		u.seen[name] = 'l'
		if err := checkLinkTarget(name, hdr.Linkname); err != nil {
			return err
		}
		u.links = append(u.links, treeLink{name: name, dst: dst, target: hdr.Linkname})
		return nil
	}
	return fmt.Errorf("%w: %s is a %s; a harness tree holds only directories, regular files and symlinks inside it",
		domain.ErrInvalid, name, tarType(hdr.Typeflag))
}

// parents creates the directories above name, refusing a path under a file
// or symlink.
func (u *unpacker) parents(name string) error {
	for p := path.Dir(name); p != "."; p = path.Dir(p) {
		switch u.seen[p] {
		case 'f':
			return fmt.Errorf("%w: %s is inside %s, which is a file", domain.ErrInvalid, name, p)
		case 'l':
			return fmt.Errorf("%w: %s is inside %s, which is a symlink", domain.ErrInvalid, name, p)
		case 0:
			u.seen[p] = 'd'
		}
	}
	return os.MkdirAll(filepath.Join(u.dir, filepath.FromSlash(path.Dir(name))), 0o700)
}

func (u *unpacker) file(name, dst string, hdr *tar.Header, body io.Reader) error {
	if hdr.Size < 0 {
		return fmt.Errorf("%w: %s has a negative size", domain.ErrInvalid, name)
	}
	if u.bytes += hdr.Size; u.bytes > maxUploadTreeBytes {
		return fmt.Errorf("%w: the tree's files hold more than %d GiB", domain.ErrInvalid, maxUploadTreeBytes>>30)
	}
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, body, hdr.Size); err != nil {
		f.Close()
		return fmt.Errorf("%w: read %s from the tar: %w", domain.ErrInvalid, name, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, os.FileMode(hdr.Mode&0o777))
}

// finish makes the symlinks and gives directories their modes.
func (u *unpacker) finish() error {
	if u.seen[guestapi.HarnessDescriptorFile] != 'f' {
		return fmt.Errorf("%w: the tree has no %s at its root", domain.ErrInvalid, guestapi.HarnessDescriptorFile)
	}
	if err := checkLinksInside(u.links); err != nil {
		return err
	}
	for _, l := range u.links {
		if err := os.Symlink(l.target, l.dst); err != nil {
			return err
		}
	}
	dirs := make([]string, 0, len(u.modes))
	for d := range u.modes {
		dirs = append(dirs, d)
	}
	slices.Sort(dirs)
	for _, d := range dirs {
		if err := os.Chmod(d, os.FileMode(u.modes[d]&0o777)); err != nil {
			return err
		}
	}
	return nil
}

// uploadPath cleans a tar entry's name; "" is the tree's root.
func uploadPath(name string) (string, error) {
	switch {
	case len(name) > maxUploadPathBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) || strings.Contains(name, `\`):
		return "", fmt.Errorf("%w: tar entry %.80q: paths must be valid UTF-8 of at most %d bytes, without control characters or backslashes",
			domain.ErrInvalid, name, maxUploadPathBytes)
	case path.IsAbs(name):
		return "", fmt.Errorf("%w: tar entry %q is an absolute path", domain.ErrInvalid, name)
	case slices.Contains(strings.Split(name, "/"), ".."):
		return "", fmt.Errorf("%w: tar entry %q has a '..' element", domain.ErrInvalid, name)
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

// checkLinkTarget refuses a symlink at name whose target is absolute or
// leads out of the tree.
func checkLinkTarget(name, target string) error {
	switch {
	case target == "" || len(target) > maxUploadPathBytes || strings.ContainsRune(target, 0):
		return fmt.Errorf("%w: symlink %s has an empty or invalid target", domain.ErrInvalid, name)
	case path.IsAbs(target):
		return fmt.Errorf("%w: symlink %s points to the absolute path %q, outside the tree", domain.ErrInvalid, name, target)
	}
	if res := path.Join(path.Dir(name), target); res == ".." || strings.HasPrefix(res, "../") {
		return fmt.Errorf("%w: symlink %s points to %q, outside the tree", domain.ErrInvalid, name, target)
	}
	return nil
}

// maxLinkDepth bounds how many symlinks one resolution may pass through
// nested, as the kernel does (ELOOP).
const maxLinkDepth = 40

var (
	errLinkOutside = errors.New("outside the tree")
	errLinkLoop    = errors.New("through a symlink loop or too many symlinks")
)

// checkLinksInside resolves every symlink's target as the kernel would,
// through the tree's other symlinks (d/e/l -> ../.. then z -> d/e/l/../..),
// and refuses one that leads out of the tree or loops.
func checkLinksInside(links []treeLink) error {
	r := linkResolver{targets: make(map[string]string, len(links)), resolved: map[string]string{}, visiting: map[string]bool{}}
	for _, l := range links {
		r.targets[l.name] = l.target
	}
	for _, l := range links {
		if _, err := r.resolve(l.name); err != nil {
			return fmt.Errorf("%w: symlink %s points to %q, %v", domain.ErrInvalid, l.name, l.target, err)
		}
	}
	return nil
}

// linkResolver resolves the tree's symlinks, each once.
type linkResolver struct {
	targets  map[string]string // symlink path -> target
	resolved map[string]string // symlink path -> the tree path it names ("" the root)
	visiting map[string]bool   // being resolved (a loop if met again)
}

func (r *linkResolver) resolve(link string) (string, error) {
	if p, ok := r.resolved[link]; ok {
		return p, nil
	}
	if r.visiting[link] || len(r.visiting) >= maxLinkDepth {
		return "", errLinkLoop
	}
	r.visiting[link] = true
	p, err := r.walk(path.Dir(link), r.targets[link])
	delete(r.visiting, link)
	if err != nil {
		return "", err
	}
	r.resolved[link] = p
	return p, nil
}

// walk resolves target from directory dir ("." is the root), following
// symlinks met on the way; paths missing from the tree count as
// directories.
func (r *linkResolver) walk(dir, target string) (string, error) {
	cur := dir
	if cur == "." {
		cur = ""
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if cur == "" {
				return "", errLinkOutside
			}
			cur = cur[:max(strings.LastIndexByte(cur, '/'), 0)]
			continue
		}
		if cur == "" {
			cur = c
		} else {
			cur += "/" + c
		}
		if _, ok := r.targets[cur]; ok {
			p, err := r.resolve(cur)
			if err != nil {
				return "", err
			}
			cur = p
		}
	}
	return cur, nil
}

// removeTree removes dir even where the tree made a directory read-only.
func removeTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

func tarType(t byte) string {
	switch t {
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "FIFO"
	case tar.TypeGNUSparse:
		return "sparse file"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}
