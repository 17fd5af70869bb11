package vmimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/testutil"
)

// treeEpoch is the modification time the test trees carry, as a pulled
// image's tree carries its layers' times.
var treeEpoch = time.Unix(1_600_000_000, 0)

func needE2fsprogs(t *testing.T) *Builder {
	t.Helper()
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not installed (scripts/install-deps.sh)", tool)
		}
	}
	b, err := New(Config{CacheDir: t.TempDir(), KernelImage: "/unused"}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeTree lays out a small system: files spread over directories with
// deterministic pseudo-random content (so each 4 MiB block holds distinct data).
func writeTree(t *testing.T, dir string, files int, fileSize int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range files {
		p := filepath.Join(dir, "usr", "lib", string(rune('a'+i%5)), "f"+string(rune('a'+i/5)))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, fileSize)
		for j := 0; j < len(data); j += 8 {
			v := rng.Uint64()
			for k := 0; k < 8 && j+k < len(data); k++ {
				data[j+k] = byte(v >> (8 * k))
			}
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setTreeTimes(t, dir)
}

func setTreeTimes(t *testing.T, dir string) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		ts := unix.NsecToTimespec(treeEpoch.UnixNano())
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func buildTree(t *testing.T, b *Builder, dir string, size int64) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	img := filepath.Join(t.TempDir(), "root.ext4")
	if err := b.TreeImage(ctx, TreeImageSpec{Dir: dir, Path: img, SizeBytes: size, Seed: "sha256:abc"}); err != nil {
		t.Fatal(err)
	}
	return img
}

// blocks returns the SHA-256 of every 4 MiB block of the file at p.
func blocks(t *testing.T, p string) [][32]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][32]byte
	buf := make([]byte, 4<<20)
	for {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			out = append(out, sha256.Sum256(buf[:n]))
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestTreeImageDeterministic(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	const size = 96 << 20
	// Two copies of the same tree, written at different moments (different
	// ctimes, atimes and inode numbers on the host), built separately.
	a, c := t.TempDir(), t.TempDir()
	writeTree(t, a, 25, 1<<20)
	writeTree(t, c, 25, 1<<20)
	imgA := buildTree(t, b, a, size)
	// Reading the tree again (atime) and building again, in another
	// wall-clock second, must not matter.
	time.Sleep(1100 * time.Millisecond)
	imgA2 := buildTree(t, b, a, size)
	imgC := buildTree(t, b, c, size)
	ba, ba2, bc := blocks(t, imgA), blocks(t, imgA2), blocks(t, imgC)
	if sum(ba) != sum(ba2) || sum(ba) != sum(bc) {
		t.Fatalf("same tree, different images: %x %x %x", sum(ba), sum(ba2), sum(bc))
	}
	t.Logf("three builds of one tree: block-hash digest %x", sum(ba))

	// One changed file: the images differ, in few 4 MiB blocks.
	f := filepath.Join(c, "usr", "lib", "c", "fc")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	setTreeTimes(t, c)
	bd := blocks(t, buildTree(t, b, c, size))
	if len(bd) != len(ba) {
		t.Fatalf("block count %d vs %d", len(bd), len(ba))
	}
	differ := 0
	for i := range ba {
		if ba[i] != bd[i] {
			differ++
		}
	}
	t.Logf("one changed file: %d of %d 4 MiB blocks differ", differ, len(ba))
	if differ == 0 || differ > 2 {
		t.Errorf("one changed file: %d of %d 4 MiB blocks differ, want 1..2", differ, len(ba))
	}
}

func sum(bs [][32]byte) [32]byte {
	h := sha256.New()
	for _, b := range bs {
		h.Write(b[:])
	}
	return [32]byte(h.Sum(nil))
}

func TestTreeImageRoundTrip(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the tree uid/gid 1000 and a setuid file")
	}
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "home/user"), 0o750))
	must(os.MkdirAll(filepath.Join(dir, "empty"), 0o700))
	must(os.WriteFile(filepath.Join(dir, "bin/tool"), []byte("#!/bin/sh\n"), 0o755))
	must(os.Chmod(filepath.Join(dir, "bin/tool"), 0o4755|os.ModeSetuid))
	must(os.Link(filepath.Join(dir, "bin/tool"), filepath.Join(dir, "bin/tool2")))
	must(os.Symlink("/bin/tool", filepath.Join(dir, "bin/sh")))
	must(os.WriteFile(filepath.Join(dir, "home/user/notes"), []byte("hello\n"), 0o600))
	must(os.Lchown(filepath.Join(dir, "home/user"), 1000, 1000))
	must(os.Lchown(filepath.Join(dir, "home/user/notes"), 1000, 1000))
	setTreeTimes(t, dir)
	img := buildTree(t, b, dir, 32<<20)

	tests := []struct {
		path string
		want []string // substrings of `debugfs -R 'stat PATH'`
	}{
		{"/bin/tool", []string{"Type: regular    Mode:  04755", "User:     0   Group:     0", "Links: 2"}},
		{"/bin/tool2", []string{"Mode:  04755", "Links: 2"}},
		{"/bin/sh", []string{"Type: symlink", `Fast link dest: "/bin/tool"`}},
		{"/home/user", []string{"Type: directory    Mode:  0750", "User:  1000   Group:  1000"}},
		{"/home/user/notes", []string{"Mode:  0600", "User:  1000   Group:  1000", "Size: 6"}},
		{"/empty", []string{"Type: directory    Mode:  0700", "Links: 2", "Size: 4096"}},
		// mke2fs makes the root inode itself: root-owned, 0755, stamped at buildEpoch.
		{"/", []string{"User:     0   Group:     0", "Mode:  0755", "mtime: 0x6553f100"}},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("debugfs", "-R", "stat "+tc.path, img).CombinedOutput()
			if err != nil {
				t.Fatalf("debugfs: %v: %s", err, out)
			}
			s := string(out)
			want := append(tc.want, "atime: 0x6553f100:00000000", "ctime: 0x6553f100:00000000", "crtime: 0x6553f100:00000000")
			if tc.path != "/" {
				want = append(want, "mtime: 0x5f5e1000") // the tree's
			}
			for _, w := range want {
				if !strings.Contains(s, w) {
					t.Errorf("stat %s lacks %q:\n%s", tc.path, w, s)
				}
			}
		})
	}
	// The hard link is one inode; the empty directory has nothing but . and ..
	ino := func(p string) string {
		out, err := exec.Command("debugfs", "-R", "stat "+p, img).Output()
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := bytes.Cut(out, []byte("Type:"))
		return string(first)
	}
	if a, c := ino("/bin/tool"), ino("/bin/tool2"); a != c {
		t.Errorf("hard link is two inodes: %q vs %q", a, c)
	}
	out, err := exec.Command("debugfs", "-R", "ls /empty", img).Output()
	if err != nil || strings.Count(string(out), "(") != 2 { // just . and ..
		t.Errorf("ls /empty = %q, %v", out, err)
	}
}

func TestTreeImageErrors(t *testing.T) {
	t.Parallel()
	b := needE2fsprogs(t)
	big := t.TempDir()
	writeTree(t, big, 12, 1<<20) // 12 MiB of data
	tests := []struct {
		name    string
		spec    TreeImageSpec
		wantErr error
		want    string
	}{
		{"too large", TreeImageSpec{Dir: big, SizeBytes: 8 << 20}, ErrTreeTooLarge, "8 MiB is too small"},
		{"no tree", TreeImageSpec{Dir: filepath.Join(big, "missing"), SizeBytes: 8 << 20}, os.ErrNotExist, "build tree image"},
		{"no size", TreeImageSpec{Dir: big}, nil, "positive size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.spec.Path = filepath.Join(t.TempDir(), "root.ext4")
			err := b.TreeImage(context.Background(), tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("err = %v, want %q (%v)", err, tc.want, tc.wantErr)
			}
			t.Logf("error: %v", err)
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(tc.spec.Path), "*"))
			if len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}
