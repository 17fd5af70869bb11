package oci

import (
	"context"
	"errors"
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
