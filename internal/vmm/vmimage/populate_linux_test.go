package vmimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/testutil"
)

// node is one entry of a test tree.
type node struct {
	name     string
	kind     byte   // 'd' directory, 'f' file, 'l' symlink, 'h' hard link, 'p' FIFO
	body     string // file content, symlink target or hard link target
	size     int64  // a file this long, sparse, with body in its middle
	perm     uint32 // permission bits, setuid/setgid/sticky included; 0 means 0755 or 0644
	uid, gid int
	mtime    time.Time // zero means treeEpoch
	xattrs   map[string]string
}

// makeTree creates nodes under dir, in the listed order or in reverse (so
// that a host file system that lists entries by creation lists them in
// another order), then gives every entry its metadata.
func makeTree(t *testing.T, dir string, nodes []node, reverse bool) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	order := slices.Clone(nodes)
	if reverse {
		slices.Reverse(order)
	}
	for _, n := range order {
		p := filepath.Join(dir, n.name)
		switch n.kind {
		case 'd':
			must(os.MkdirAll(p, 0o755))
			continue
		case 'h':
			continue
		}
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		switch n.kind {
		case 'f':
			must(writeSparse(p, n.body, n.size))
		case 'l':
			must(os.Symlink(n.body, p))
		case 'p':
			must(unix.Mkfifo(p, 0o644))
		}
	}
	for _, n := range order {
		if n.kind == 'h' {
			must(os.Link(filepath.Join(dir, n.body), filepath.Join(dir, n.name)))
		}
	}
	for _, n := range nodes { // last: creating entries changes their directory
		if n.kind != 'h' {
			must(setMeta(filepath.Join(dir, n.name), n))
		}
	}
}

func writeSparse(p, body string, size int64) error {
	if size == 0 {
		return os.WriteFile(p, []byte(body), 0o644)
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	_, err = f.WriteAt([]byte(body), size/2)
	return err
}

// setMeta gives p the node's owner (as root), mode, xattrs and mtime, in the
// order that keeps them all (chown clears setuid bits and capabilities).
func setMeta(p string, n node) error {
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, n.uid, n.gid); err != nil {
			return err
		}
	}
	if n.kind != 'l' {
		perm := n.perm
		if perm == 0 {
			perm = map[bool]uint32{true: 0o755, false: 0o644}[n.kind == 'd']
		}
		if err := unix.Chmod(p, perm); err != nil {
			return err
		}
	}
	for k, v := range n.xattrs {
		if err := unix.Lsetxattr(p, k, []byte(v), 0); err != nil {
			return fmt.Errorf("set %s on %s: %w", k, p, err)
		}
	}
	mt := n.mtime
	if mt.IsZero() {
		mt = treeEpoch
	}
	ts := unix.NsecToTimespec(mt.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}

// sortedOrder lists the tree at dir by name: a valid order (a directory's
// name sorts before its entries').
func sortedOrder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func buildOrdered(t *testing.T, b *Builder, dir string, order []string, size int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img := filepath.Join(t.TempDir(), "root.ext4")
	spec := TreeImageSpec{Dir: dir, Path: img, SizeBytes: size, Seed: "seed", Order: order}
	if err := b.TreeImage(ctx, spec); err != nil {
		t.Fatal(err)
	}
	return img
}

// fsck runs e2fsck -fn on img: it must find nothing to fix.
func fsck(t *testing.T, img string) {
	t.Helper()
	if _, err := exec.LookPath("e2fsck"); err != nil {
		testutil.SkipOrFail(t, "e2fsck not installed (scripts/install-deps.sh)")
	}
	out, err := exec.Command("e2fsck", "-fn", img).CombinedOutput()
	if err != nil {
		t.Fatalf("e2fsck -fn %s: %v\n%s", img, err, out)
	}
}

// scratchDir is a directory on tmpfs when there is one (it lists entries by
// creation, newest first), else a test temporary directory.
func scratchDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/dev/shm", "treefs-test-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// readdirNames is the host's listing of dir, in its order.
func readdirNames(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// systemNodes is a small system: data spread over directories (each file
// its own distinct bytes), symlinks and hard links.
func systemNodes() []node {
	var nodes []node
	for i := range 20 {
		nodes = append(nodes, node{
			name: fmt.Sprintf("usr/lib/%c/f%02d", 'a'+i%4, i), kind: 'f',
			body: strings.Repeat(fmt.Sprintf("%02d", i), 1<<19), // 1 MiB
		})
	}
	return append(nodes,
		node{name: "etc", kind: 'd'}, node{name: "etc/passwd", kind: 'f', body: "root:x:0:0::/root:/bin/sh\n"},
		node{name: "usr/bin/tool", kind: 'f', body: "#!/bin/sh\n", perm: 0o755},
		node{name: "usr/bin/tool2", kind: 'h', body: "usr/bin/tool"},
		node{name: "bin", kind: 'l', body: "usr/bin"},
		node{name: "tmp", kind: 'd', perm: 0o1777},
	)
}

func TestTreeImageOrderReproducible(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	const size = 96 << 20
	a, c := scratchDir(t), scratchDir(t)
	makeTree(t, a, systemNodes(), false)
	makeTree(t, c, systemNodes(), true)
	setTreeTimes(t, a) // the directories made on the way too
	setTreeTimes(t, c)
	order := sortedOrder(t, a)
	if got := sortedOrder(t, c); !slices.Equal(got, order) {
		t.Fatalf("the trees differ: %q vs %q", got, order)
	}
	imgA, imgC := buildOrdered(t, b, a, order, size), buildOrdered(t, b, c, order, size)
	time.Sleep(1100 * time.Millisecond) // another wall-clock second
	imgA2 := buildOrdered(t, b, a, order, size)
	ba, bc, ba2 := blocks(t, imgA), blocks(t, imgC), blocks(t, imgA2)
	if sum(ba) != sum(bc) || sum(ba) != sum(ba2) {
		t.Fatalf("same tree and order, different images: %x %x %x", sum(ba), sum(bc), sum(ba2))
	}
	fsck(t, imgA)
	// On tmpfs (newest first) the host lists the two trees differently.
	listed := slices.Equal(readdirNames(t, filepath.Join(a, "usr/lib/a")), readdirNames(t, filepath.Join(c, "usr/lib/a")))
	t.Logf("host listings equal: %v; block-hash digest %x", listed, sum(ba))
}

func TestTreeImageOrderPrefixStable(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	const size = 96 << 20
	base, grown := t.TempDir(), t.TempDir()
	extra := []node{
		{name: "etc/0-added", kind: 'f', body: "new\n"},
		{name: "opt", kind: 'd'}, {name: "opt/app", kind: 'f', body: strings.Repeat("x", 100<<10)},
	}
	makeTree(t, base, systemNodes(), false)
	makeTree(t, grown, append(systemNodes(), extra...), false)
	setTreeTimes(t, base)
	setTreeTimes(t, grown)
	order := sortedOrder(t, base)
	// What the added layer brings comes last, whatever its names.
	grownOrder := append(slices.Clone(order), "etc/0-added", "opt", "opt/app")
	b1, b2 := blocks(t, buildOrdered(t, b, base, order, size)), blocks(t, buildOrdered(t, b, grown, grownOrder, size))
	differ := 0
	for i := range b1 {
		if b1[i] != b2[i] {
			differ++
		}
	}
	t.Logf("entries added after a prefix: %d of %d 4 MiB blocks differ", differ, len(b1))
	// The metadata block (superblock, group descriptors, bitmaps, inode
	// table), etc's directory block and the new data, if they fall apart.
	if differ == 0 || differ > 3 {
		t.Errorf("%d of %d 4 MiB blocks differ, want 1..3", differ, len(b1))
	}
}

// oddNames are names a debugfs script must quote.
var oddNames = []string{"with space", `quo"te`, `""`, `back\slash`, "ünïcødé", "<12>", "tab\there", "-dash", "#hash", "!bang", "'single'"}

func TestTreeImageOrderRoundTrip(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root for owners, a setuid file and file capabilities")
	}
	capV2 := "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" // cap_net_raw+p
	nano := time.Unix(1_600_000_000, 123_456_789)
	old := time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC)
	long := strings.Repeat("long/", 40) + "target"
	nodes := []node{
		{name: "bin/tool", kind: 'f', body: "#!/bin/sh\n", perm: 0o4755},
		{name: "bin/tool2", kind: 'h', body: "bin/tool"},
		{name: "bin/sh", kind: 'l', body: "/bin/tool"},
		{name: "bin/sh2", kind: 'h', body: "bin/sh"},
		{name: "bin/long", kind: 'l', body: long},
		{name: "home/user", kind: 'd', perm: 0o2750, uid: 1000, gid: 1000},
		{name: "home/user/notes", kind: 'f', body: "hello\n", perm: 0o600, uid: 1000, gid: 1000},
		{name: "empty", kind: 'd', perm: 0o700},
		{name: "files", kind: 'd'},
		{name: "files/empty", kind: 'f'},
		{name: "files/sparse", kind: 'f', body: "middle", size: 8 << 20},
		{name: "files/cap", kind: 'f', body: "elf", xattrs: map[string]string{"security.capability": capV2, "user.note": "a \"b\"\n"}},
		{name: "files/fifo", kind: 'p', perm: 0o600},
		{name: "files/nano", kind: 'f', body: "n", mtime: nano},
		{name: "files/old", kind: 'f', body: "o", mtime: old},
		{name: "lost+found", kind: 'd', perm: 0o700},
		{name: "lost+found/kept", kind: 'f', body: "k"},
	}
	for _, n := range oddNames {
		nodes = append(nodes, node{name: "odd/" + n, kind: 'f', body: n}, node{name: "odd/dir " + n + "/f", kind: 'f', body: "in " + n})
	}
	dir := t.TempDir()
	makeTree(t, dir, nodes, false)
	img := buildOrdered(t, b, dir, sortedOrder(t, dir), 64<<20)
	fsck(t, img)

	tests := []struct {
		path string
		want []string // substrings of `debugfs -R 'stat PATH'`
	}{
		{"/bin/tool", []string{"Type: regular    Mode:  04755", "User:     0   Group:     0", "Links: 2"}},
		{"/bin/tool2", []string{"Mode:  04755", "Links: 2"}},
		{"/bin/sh", []string{"Type: symlink", `Fast link dest: "/bin/tool"`, "Links: 2"}},
		{"/bin/long", []string{"Type: symlink", "Size: " + fmt.Sprint(len(long))}},
		{"/home/user", []string{"Type: directory    Mode:  02750", "User:  1000   Group:  1000"}},
		{"/home/user/notes", []string{"Mode:  0600", "User:  1000   Group:  1000", "Size: 6"}},
		{"/empty", []string{"Type: directory    Mode:  0700", "Links: 2", "Size: 4096"}},
		{"/files", []string{"Type: directory    Mode:  0755", "Links: 2"}},
		{"/files/empty", []string{"Size: 0", "Blockcount: 0"}},
		{"/files/sparse", []string{"Size: 8388608", "Blockcount: 8"}},
		{"/files/cap", []string{"Type: regular    Mode:  0644", "security.capability (20) = 01 00 00 02 00 20 00 00", "user.note (6) = 61 20 22 62 22 0a"}},
		{"/files/fifo", []string{"Type: FIFO", "Mode:  0600"}},
		{"/files/nano", []string{fmt.Sprintf("mtime: 0x%08x:%08x", uint32(nano.Unix()), 123_456_789<<2)}},
		{"/files/old", []string{fmt.Sprintf("mtime: 0x%08x:00000000", uint32(old.Unix()))}},
		{"/lost+found", []string{"Type: directory    Mode:  0700"}},
		{"/", []string{"User:     0   Group:     0", "Mode:  0755", "mtime: 0x6553f100"}},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			s := debugfsStat(t, img, tc.path)
			want := append(tc.want, "atime: 0x6553f100:00000000", "ctime: 0x6553f100:00000000", "crtime: 0x6553f100:00000000")
			if !strings.HasPrefix(tc.path, "/files/") && tc.path != "/" {
				want = append(want, "mtime: 0x5f5e1000:00000000") // the tree's
			}
			for _, w := range want {
				if !strings.Contains(s, w) {
					t.Errorf("stat %s lacks %q:\n%s", tc.path, w, s)
				}
			}
		})
	}
	for _, n := range nodes {
		if n.kind == 'f' {
			checkContent(t, img, dir, n.name)
		}
	}
}

func debugfsStat(t *testing.T, img, p string) string {
	t.Helper()
	out, err := exec.Command("debugfs", "-R", "stat "+debugfsQuote(p), img).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs stat %s: %v: %s", p, err, out)
	}
	return string(out)
}

// checkContent compares a file of the image with the tree's.
func checkContent(t *testing.T, img, dir, name string) {
	t.Helper()
	dump := filepath.Join(t.TempDir(), "dump")
	out, err := exec.Command("debugfs", "-R", "dump "+debugfsQuote("/"+name)+" "+debugfsQuote(dump), img).CombinedOutput()
	if err != nil {
		t.Fatalf("debugfs dump %s: %v: %s", name, err, out)
	}
	got, err := os.ReadFile(dump)
	if err != nil {
		t.Fatalf("dump %q: %v: %s", name, err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%q: %d bytes in the image, %d in the tree, or different", name, len(got), len(want))
	}
}

// TestTreeImageOrderLargeDirectory fills one directory with 5000 files,
// then 1000 more names of one of them (ln does not grow directories by
// itself), and checks the image with e2fsck.
func TestTreeImageOrderLargeDirectory(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	var nodes []node
	for i := range 5000 {
		nodes = append(nodes, node{name: fmt.Sprintf("many/file-with-a-longish-name-%04d", i), kind: 'f', body: fmt.Sprint(i)})
	}
	for i := range 1000 {
		nodes = append(nodes, node{name: fmt.Sprintf("many/link-%03d", i), kind: 'h', body: "many/file-with-a-longish-name-0000"})
	}
	dir := t.TempDir()
	makeTree(t, dir, nodes, false)
	order := sortedOrder(t, dir)
	start := time.Now()
	img := buildOrdered(t, b, dir, order, 128<<20)
	t.Logf("%d entries in one directory: built in %s", len(order), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	buildTree(t, b, dir, 128<<20)
	t.Logf("with mke2fs -d (and the time stamping): %s", time.Since(start).Round(time.Millisecond))
	fsck(t, img)
	out, err := exec.Command("debugfs", "-R", "ls -p /many", img).Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), "/file-with-a-longish-name-") + strings.Count(string(out), "/link-"); n != 6000 {
		t.Errorf("ls /many lists %d entries, want 6000", n)
	}
	if s := debugfsStat(t, img, "/many/link-999"); !strings.Contains(s, "Links: 1001") {
		t.Errorf("/many/link-999:\n%s", s)
	}
	checkContent(t, img, dir, "many/file-with-a-longish-name-4999")
}

func TestTreeImageOrderErrors(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	tests := []struct {
		name    string
		nodes   []node
		order   func([]string) []string // from the sorted order; nil: keep it
		wantErr error
		want    string
	}{
		{"line break in a name", []node{{name: "a\nb", kind: 'f'}}, nil, ErrUnsupportedTree, "line break"},
		{"carriage return in a symlink target", []node{{name: "l", kind: 'l', body: "a\rb"}}, nil, ErrUnsupportedTree, "line break"},
		{"an entry not listed", []node{{name: "a", kind: 'f'}, {name: "b", kind: 'f'}},
			func(o []string) []string { return o[:1] }, ErrUnsupportedTree, `does not list "b"`},
		{"an entry listed twice", []node{{name: "a", kind: 'f'}},
			func(o []string) []string { return append(o, o...) }, ErrUnsupportedTree, "listed twice"},
		{"an entry before its directory", []node{{name: "d/f", kind: 'f'}},
			func(o []string) []string { return []string{"d/f", "d"} }, ErrUnsupportedTree, "before its directory"},
		{"a name leaving the tree", []node{{name: "a", kind: 'f'}},
			func(o []string) []string { return append(o, "../x") }, ErrUnsupportedTree, "not a clean relative path"},
		{"a missing entry", []node{{name: "a", kind: 'f'}},
			func(o []string) []string { return append(o, "gone") }, os.ErrNotExist, "stat gone"},
		{"too large", []node{{name: "big", kind: 'f', body: strings.Repeat("x", 12<<20)}}, nil, ErrTreeTooLarge, "8 MiB is too small"},
		{"a socket", nil, nil, ErrUnsupportedTree, "socket"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			makeTree(t, dir, tc.nodes, false)
			if tc.nodes == nil {
				l, err := net.Listen("unix", filepath.Join(dir, "sock"))
				if err != nil {
					t.Fatal(err)
				}
				defer l.Close()
			}
			order := sortedOrder(t, dir)
			if tc.order != nil {
				order = tc.order(order)
			}
			p := filepath.Join(t.TempDir(), "root.ext4")
			err := b.TreeImage(context.Background(), TreeImageSpec{Dir: dir, Path: p, SizeBytes: 8 << 20, Order: order})
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %q (%v)", err, tc.want, tc.wantErr)
			}
			t.Logf("error: %v", err)
			if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), "*")); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
