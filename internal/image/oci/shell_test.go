package oci

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestPullReportsShell(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	tests := []struct {
		name string
		ents []ent
		want bool
	}{
		{"alpine-like: /bin/sh -> /bin/busybox", []ent{
			dir("bin/", 0o755), file("bin/busybox", "\x7fELF", 0o755), symlink("bin/sh", "/bin/busybox")}, true},
		{"usrmerge: /bin -> usr/bin, sh -> dash", []ent{
			symlink("bin", "usr/bin"), file("usr/bin/dash", "\x7fELF", 0o755), symlink("usr/bin/sh", "dash")}, true},
		{"absolute target climbing above / stays inside", []ent{
			file("bin/busybox", "\x7fELF", 0o755), symlink("bin/sh", "/../../bin/busybox")}, true},
		{"regular /bin/sh", []ent{file("bin/sh", "\x7fELF", 0o755)}, true},
		{"no /bin/sh", []ent{file("etc/hostname", "x", 0o644)}, false},
		{"dangling symlink", []ent{symlink("bin/sh", "/bin/missing")}, false},
		{"symlink loop", []ent{symlink("bin/sh", "sh2"), symlink("bin/sh2", "sh")}, false},
		{"not executable", []ent{file("bin/sh", "\x7fELF", 0o644)}, false},
		{"a directory", []ent{dir("bin/sh/", 0o755)}, false},
		{"/bin is a file", []ent{file("bin", "x", 0o755)}, false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ref, _ := push(t, host, "shell"+string(rune('a'+i))+":v1", image(t, "amd64", v1.Config{}, layer(t, tc.ents...)))
			img, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if img.HasShell != tc.want {
				t.Errorf("HasShell %v, want %v", img.HasShell, tc.want)
			}
			if err := img.RequireShell(); (err == nil) != tc.want || (err != nil && !errors.Is(err, ErrNoShell)) {
				t.Errorf("RequireShell: %v", err)
			}
			if got, err := HasShell(target); err != nil || got != tc.want {
				t.Errorf("HasShell(%s) = %v, %v", target, got, err)
			}
			if tc.want {
				return
			}
			// With RequireShell, the pull itself refuses and leaves nothing.
			parent := t.TempDir()
			target = filepath.Join(parent, "rootfs")
			_, err = newPuller().Pull(context.Background(), Request{Ref: ref, Target: target, RequireShell: true})
			t.Logf("err: %v", err)
			if !errors.Is(err, ErrNoShell) || !strings.Contains(err.Error(), "/bin/sh") {
				t.Fatalf("err %v, want ErrNoShell", err)
			}
			assertGone(t, target, parent)
		})
	}
}

// LstatInRoot resolves directories inside the tree, never on the host, and does not
// follow the last component.
func TestLstatInRoot(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, l := range [][2]string{{"lib", "/usr/lib"}, {"hostetc", "/etc"}, {"usr/lib/dangling", "/nowhere"}} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(l[0])), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(l[1], filepath.Join(root, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "usr/lib/ld.so"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		want fs.FileMode // 0: not found
	}{
		{"/lib/ld.so", 0o755},             // through an absolute symlink inside the tree
		{"lib/ld.so", 0o755},              // relative names are the same
		{"/hostetc/passwd", 0},            // /etc of the tree, not the host's
		{"/lib/dangling", fs.ModeSymlink}, // the last component is not followed
		{"/usr/lib/ld.so/x", 0},           // a file where a directory should be
		{"/../../../etc/passwd", 0},       // ".." stops at the root
	}
	for _, tc := range tests {
		fi, err := LstatInRoot(root, tc.name)
		switch {
		case tc.want == 0 && err == nil:
			t.Errorf("%s: found %v, want nothing", tc.name, fi.Mode())
		case tc.want != 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == fs.ModeSymlink && fi.Mode()&fs.ModeSymlink == 0, tc.want == 0o755 && !fi.Mode().IsRegular():
			t.Errorf("%s: %v, want %v", tc.name, fi.Mode(), tc.want)
		}
	}
}
