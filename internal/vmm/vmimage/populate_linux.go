package vmimage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// debugfsMaxLine is the longest script line debugfs reads whole (it reads
// lines with fgets into an 8192-byte buffer).
const debugfsMaxLine = 8190

// treeEntry is one entry of spec.Order and what Lstat says of it.
type treeEntry struct {
	name string // "etc/passwd"
	st   unix.Stat_t
}

// inodeID tells hard links apart: names with one (dev, ino) are one inode.
type inodeID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) inodeID { return inodeID{st.Dev, st.Ino} }

// statOrder checks that order lists every entry of the tree at root exactly
// once (the root itself excepted), each after its directory, and stats them.
// It also counts the names of every inode that has several.
func statOrder(root string, order []string) ([]treeEntry, map[inodeID]int, error) {
	ents := make([]treeEntry, 0, len(order))
	dirs := map[string]bool{".": true}
	listed := make(map[string]bool, len(order))
	links := map[inodeID]int{}
	for _, name := range order {
		if err := checkOrderName(name); err != nil {
			return nil, nil, err
		}
		if listed[name] {
			return nil, nil, fmt.Errorf("%w: %q is listed twice", ErrUnsupportedTree, name)
		}
		if !dirs[path.Dir(name)] {
			return nil, nil, fmt.Errorf("%w: %q is listed before its directory", ErrUnsupportedTree, name)
		}
		listed[name] = true
		e := treeEntry{name: name}
		if err := unix.Lstat(filepath.Join(root, filepath.FromSlash(name)), &e.st); err != nil {
			return nil, nil, fmt.Errorf("stat %s: %w", name, err)
		}
		if e.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			dirs[name] = true
		} else if e.st.Nlink > 1 {
			links[idOf(&e.st)]++
		}
		ents = append(ents, e)
	}
	if err := checkListed(root, listed); err != nil {
		return nil, nil, err
	}
	return ents, links, nil
}

// checkOrderName refuses names that are not clean relative paths, and line
// breaks.
func checkOrderName(name string) error {
	switch {
	case strings.ContainsAny(name, "\n\r"):
		return fmt.Errorf("%w: %q has a line break in its name", ErrUnsupportedTree, name)
	case name == "" || name == "." || path.IsAbs(name) || path.Clean(name) != name ||
		name == ".." || strings.HasPrefix(name, "../"):
		return fmt.Errorf("%w: %q is not a clean relative path", ErrUnsupportedTree, name)
	}
	return nil
}

// checkListed walks the tree and refuses any entry listed does not hold.
func checkListed(root string, listed map[string]bool) error {
	return filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if name := filepath.ToSlash(rel); !listed[name] {
			return fmt.Errorf("%w: the order does not list %q", ErrUnsupportedTree, name)
		}
		return nil
	})
}

// orderScript writes to w the debugfs script that copies ents (from the
// tree at root) into an empty file system in their order. Extended
// attribute values go to files in vals.
type orderScript struct {
	root  string
	vals  string
	w     *bufio.Writer
	cwd   string          // image directory of the last cd; "" before the first
	links map[inodeID]int // names of each inode that has several
	first map[inodeID]string
	nvals int
}

func (s *orderScript) line(args ...string) error {
	var b strings.Builder
	b.WriteString(args[0])
	for _, a := range args[1:] {
		b.WriteByte(' ')
		b.WriteString(debugfsQuote(a))
	}
	if b.Len() > debugfsMaxLine {
		return fmt.Errorf("%w: a debugfs command would be %d bytes long: %.100s…", ErrUnsupportedTree, b.Len(), b.String())
	}
	b.WriteByte('\n')
	_, err := s.w.WriteString(b.String())
	return err
}

// debugfsQuote quotes a debugfs argument: inside double quotes every byte is
// literal but the double quote, which is doubled.
func debugfsQuote(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// writeAll writes the whole script: the root's extended attributes, then
// every entry. A root lost+found that is not a directory in the tree
// replaces mke2fs's.
func (s *orderScript) writeAll(ents []treeEntry) error {
	if err := s.xattrs(s.root, "/"); err != nil {
		return err
	}
	for _, e := range ents {
		if e.name == "lost+found" && e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := s.line("rmdir", "/lost+found"); err != nil {
				return err
			}
		}
	}
	for _, e := range ents {
		if err := s.entry(e); err != nil {
			return fmt.Errorf("%s: %w", e.name, err)
		}
	}
	return s.w.Flush()
}

// entry creates one entry in its directory, then gives it the tree's
// metadata; a second name of an inode is linked to the first.
func (s *orderScript) entry(e treeEntry) error {
	dir, base := path.Dir(e.name), path.Base(e.name)
	if err := s.chdir(dir); err != nil {
		return err
	}
	id := idOf(&e.st)
	isDir := e.st.Mode&unix.S_IFMT == unix.S_IFDIR
	if n := s.links[id]; !isDir && n > 1 {
		if first, ok := s.first[id]; ok {
			return s.link(first, base)
		}
		s.first[id] = "/" + e.name
	}
	if err := s.create(e, base); err != nil {
		return err
	}
	return s.attrs(e, base)
}

// chdir makes dir the current directory, in the image and on the host (so
// write reads short relative host names).
func (s *orderScript) chdir(dir string) error {
	if dir == s.cwd {
		return nil
	}
	s.cwd = dir
	if err := s.line("cd", path.Join("/", dir)); err != nil {
		return err
	}
	return s.line("lcd", filepath.Join(s.root, filepath.FromSlash(dir)))
}

// link adds base, in the current directory, as another name of the inode at
// first. debugfs's ln does not grow a full directory, so a placeholder made
// by mknod (which does) takes the slot first and is removed: the link then
// fills the exact slot it freed. Its inode is freed too, and is the next one
// allocated.
func (s *orderScript) link(first, base string) error {
	for _, l := range [][]string{{"mknod", base, "p"}, {"rm", "./" + base}, {"ln", first, base}} {
		if err := s.line(l...); err != nil {
			return err
		}
	}
	return nil
}

// create makes the entry in the current directory: the debugfs commands
// allocate inodes and blocks as mke2fs -d does, growing directories as they
// fill. A root lost+found directory is mke2fs's own, kept.
func (s *orderScript) create(e treeEntry, base string) error {
	host := filepath.Join(s.root, filepath.FromSlash(e.name))
	switch e.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if e.name == "lost+found" {
			return nil
		}
		return s.line("mkdir", base)
	case unix.S_IFREG:
		return s.line("write", base, base)
	case unix.S_IFLNK:
		target, err := os.Readlink(host)
		if err != nil {
			return err
		}
		if strings.ContainsAny(target, "\n\r") {
			return fmt.Errorf("%w: a symlink to a target with a line break", ErrUnsupportedTree)
		}
		return s.line("symlink", base, target)
	case unix.S_IFIFO:
		return s.line("mknod", base, "p")
	case unix.S_IFCHR, unix.S_IFBLK:
		kind := map[uint32]string{unix.S_IFCHR: "c", unix.S_IFBLK: "b"}[e.st.Mode&unix.S_IFMT]
		return s.line("mknod", base, kind,
			strconv.FormatUint(uint64(unix.Major(e.st.Rdev)), 10), strconv.FormatUint(uint64(unix.Minor(e.st.Rdev)), 10))
	}
	return fmt.Errorf("%w: a socket or an unknown file type (mode %#o)", ErrUnsupportedTree, e.st.Mode)
}

// attrs gives the entry just created the tree's mode (with its setuid,
// setgid and sticky bits), owner, modification time (to the nanosecond),
// link count and extended attributes. Creation stamped its access, change
// and creation times with the build's fake time, nanoseconds zero, and made
// it root-owned. Every sif looks the name up, scanning its directory, so
// only what creation did not already set is set.
func (s *orderScript) attrs(e treeEntry, base string) error {
	ref := "./" + base // never read as "<inode number>"
	mtime, extra := ext4Time(e.st.Mtim.Sec, e.st.Mtim.Nsec)
	var cmds [][]string
	if e.st.Mode != createdMode(e) {
		cmds = append(cmds, []string{"sif", ref, "mode", fmt.Sprintf("0%o", e.st.Mode&0o177777)})
	}
	cmds = append(cmds, []string{"sif", ref, "mtime_lo", fmt.Sprintf("0x%x", mtime)})
	if extra != 0 {
		cmds = append(cmds, []string{"sif", ref, "mtime_extra", strconv.FormatUint(uint64(extra), 10)})
	}
	if e.st.Uid != 0 {
		cmds = append(cmds, []string{"sif", ref, "uid", strconv.FormatUint(uint64(e.st.Uid), 10)})
	}
	if e.st.Gid != 0 {
		cmds = append(cmds, []string{"sif", ref, "gid", strconv.FormatUint(uint64(e.st.Gid), 10)})
	}
	if n := s.links[idOf(&e.st)]; n > 1 && e.st.Mode&unix.S_IFMT != unix.S_IFDIR {
		cmds = append(cmds, []string{"sif", ref, "links_count", strconv.Itoa(n)})
	}
	for _, c := range cmds {
		if err := s.line(c...); err != nil {
			return err
		}
	}
	return s.xattrs(filepath.Join(s.root, filepath.FromSlash(e.name)), ref)
}

// createdMode is the mode debugfs gives the entry it creates: write copies
// the host file's, mkdir uses 0755 (umask 022), symlink 0777, mknod none.
// mke2fs made the root lost+found 0700.
func createdMode(e treeEntry) uint32 {
	switch e.st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return e.st.Mode
	case unix.S_IFDIR:
		if e.name == "lost+found" {
			return unix.S_IFDIR | 0o700
		}
		return unix.S_IFDIR | 0o755
	case unix.S_IFLNK:
		return unix.S_IFLNK | 0o777
	}
	return e.st.Mode & unix.S_IFMT
}

// ext4Time encodes a time as ext4 stores it: the low 32 bits of the seconds,
// and an extra word of nanoseconds and epoch bits, clamped to the range ext4
// can hold (1901 to 2446).
func ext4Time(sec, nsec int64) (lo, extra uint32) {
	const minSec, maxSec = -1 << 31, 1<<34 - 1<<31 - 1
	switch {
	case sec < minSec:
		sec, nsec = minSec, 0
	case sec > maxSec:
		sec, nsec = maxSec, 999_999_999
	}
	epoch := uint32((sec-int64(int32(sec)))>>32) & 3
	return uint32(sec), epoch | uint32(nsec)<<2
}

// keepXattr says which extended attributes are image content: file
// capabilities, user attributes and POSIX ACLs. Other security.* attributes
// (SELinux, IMA, …) and trusted.* are the host's, not the tree's.
func keepXattr(name string) bool {
	return name == "security.capability" || strings.HasPrefix(name, "user.") ||
		name == "system.posix_acl_access" || name == "system.posix_acl_default"
}

// xattrs copies host's kept extended attributes, by name, to ref; each
// value goes through a file (ea_set -f), so any bytes are kept.
func (s *orderScript) xattrs(host, ref string) error {
	names, err := listXattrs(host)
	if err != nil {
		return err
	}
	for _, name := range names {
		val, err := getXattr(host, name)
		if err != nil {
			return err
		}
		if len(val) > 4096 {
			return fmt.Errorf("%w: extended attribute %s is %d bytes, more than a block", ErrUnsupportedTree, name, len(val))
		}
		f := filepath.Join(s.vals, strconv.Itoa(s.nvals))
		s.nvals++
		if err := os.WriteFile(f, val, 0o600); err != nil {
			return err
		}
		if err := s.line("ea_set", "-f", f, ref, name); err != nil {
			return err
		}
	}
	return nil
}

// listXattrs returns the kept extended attribute names of p, sorted (the
// host file system lists them in its own order).
func listXattrs(p string) ([]string, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Llistxattr(p, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list extended attributes: %w", err)
		}
		var names []string
		for _, name := range strings.Split(string(buf[:n]), "\x00") {
			if name != "" && keepXattr(name) {
				names = append(names, name)
			}
		}
		slices.Sort(names)
		return names, nil
	}
}

func getXattr(p, name string) ([]byte, error) {
	for size := 256; ; size *= 4 {
		buf := make([]byte, size)
		n, err := unix.Lgetxattr(p, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read extended attribute %s: %w", name, err)
		}
		return buf[:n], nil
	}
}

// writeOrderScript writes, in work, the debugfs script that copies the tree
// at dir in order (and the extended attribute values it reads), and returns
// its path.
func writeOrderScript(dir string, order []string, work string) (string, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	ents, links, err := statOrder(root, order)
	if err != nil {
		return "", err
	}
	vals := filepath.Join(work, "xattrs")
	if err := os.Mkdir(vals, 0o700); err != nil {
		return "", err
	}
	f, err := os.Create(filepath.Join(work, "populate.debugfs"))
	if err != nil {
		return "", err
	}
	s := &orderScript{root: root, vals: vals, w: bufio.NewWriterSize(f, 1<<20), links: links, first: map[inodeID]string{}}
	err = s.writeAll(ents)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("write the debugfs script: %w", err)
	}
	return f.Name(), nil
}

// runScript runs a debugfs script against img, read-write, under the
// build's fake time. debugfs exits 0 whatever its commands do, so its
// output is read: any line but the echo of a command, an "Allocated inode"
// note or a blank line is a failure of the command before it.
func (b *Builder) runScript(ctx context.Context, img, script string, size int64) error {
	out := &debugfsOutput{}
	cmd := exec.CommandContext(ctx, b.cfg.Debugfs, "-w", "-f", script, img)
	cmd.Env = append(os.Environ(), fakeTime)
	cmd.Stdout, cmd.Stderr = out, out // one pipe: errors follow their command
	err := cmd.Run()
	out.flush()
	switch {
	case err != nil:
		return fmt.Errorf("debugfs: %w: %s", err, strings.Join(out.errs, "; "))
	case out.failed > 0 && out.noSpace:
		return fmt.Errorf("%w: %d MiB is too small (debugfs: %s)", ErrTreeTooLarge, size>>20, strings.Join(out.errs, "; "))
	case out.failed > 0:
		return fmt.Errorf("debugfs: %d commands failed: %s", out.failed, strings.Join(out.errs, "; "))
	}
	return nil
}

// debugfsOutput reads debugfs's output line by line, keeping the first few
// failures with the command each follows.
type debugfsOutput struct {
	partial []byte
	last    string   // the command being run ("" before the first)
	errs    []string // the first maxErrs failures, "command: message"
	failed  int      // lines of failure
	noSpace bool     // a failure says the file system is full
}

const maxErrs = 5

func (o *debugfsOutput) Write(p []byte) (int, error) {
	o.partial = append(o.partial, p...)
	start := 0
	for {
		i := bytes.IndexByte(o.partial[start:], '\n')
		if i < 0 {
			break
		}
		o.line(string(o.partial[start : start+i]))
		start += i + 1
	}
	o.partial = o.partial[:copy(o.partial, o.partial[start:])]
	return len(p), nil
}

func (o *debugfsOutput) flush() {
	if len(o.partial) > 0 {
		o.line(string(o.partial))
		o.partial = nil
	}
}

func (o *debugfsOutput) line(l string) {
	switch {
	case strings.HasPrefix(l, "debugfs: "):
		o.last = l[len("debugfs: "):]
		return
	case l == "", strings.HasPrefix(l, "Allocated inode: "):
		return
	case o.last == "" && strings.HasPrefix(l, "debugfs "): // the version banner
		return
	}
	o.failed++
	o.noSpace = o.noSpace || isNoSpace(l)
	if len(o.errs) < maxErrs {
		o.errs = append(o.errs, fmt.Sprintf("%.300s: %.300s", o.last, l))
	}
}
