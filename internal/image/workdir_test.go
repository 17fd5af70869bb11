package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

func newMaterializer(work string) (*Materializer, error) {
	return New(Config{WorkDir: work}, Deps{Puller: oci.New(oci.Config{}, oci.Deps{Dialer: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})}), Imager: nopImager{}, Chunks: nopChunks{}})
}

// The work dir must be private: a real directory of this user, writable by no one
// else, below directories no one else may change (sticky ones like /tmp excepted).
func TestWorkDirMustBePrivate(t *testing.T) {
	t.Parallel()
	mkdir := func(t *testing.T, p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		dir  func(t *testing.T, base string) string
		want string // "" accepted, else in the error
	}{
		{"private", func(t *testing.T, b string) string { return mkdir(t, b+"/w", 0o700) }, ""},
		{"readable by others, not writable", func(t *testing.T, b string) string { return mkdir(t, b+"/w", 0o755) }, ""},
		{"below a sticky world-writable dir", func(t *testing.T, b string) string {
			mkdir(t, b+"/tmp", 0o777|os.ModeSticky)
			return mkdir(t, b+"/tmp/w", 0o700)
		}, ""},
		{"world-writable", func(t *testing.T, b string) string { return mkdir(t, b+"/w", 0o777) }, "writable by other users"},
		{"group-writable", func(t *testing.T, b string) string { return mkdir(t, b+"/w", 0o770) }, "writable by other users"},
		{"sticky world-writable itself", func(t *testing.T, b string) string { return mkdir(t, b+"/w", 0o777|os.ModeSticky) }, "writable by other users"},
		{"below a world-writable dir", func(t *testing.T, b string) string {
			mkdir(t, b+"/open", 0o777)
			return mkdir(t, b+"/open/w", 0o700)
		}, "writable by other users"},
		{"a symlink to a private dir", func(t *testing.T, b string) string {
			mkdir(t, b+"/real", 0o700)
			if err := os.Symlink(b+"/real", b+"/w"); err != nil {
				t.Fatal(err)
			}
			return b + "/w"
		}, "is a symlink"},
		{"a file", func(t *testing.T, b string) string {
			if err := os.WriteFile(b+"/w", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return b + "/w"
		}, "not a directory"},
		{"another user's", func(t *testing.T, b string) string {
			if os.Geteuid() != 0 {
				t.Skip("giving a directory to another user needs root")
			}
			p := mkdir(t, b+"/w", 0o700)
			if err := os.Chown(p, 4242, 4242); err != nil {
				t.Fatal(err)
			}
			return p
		}, "owned by uid 4242"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := tc.dir(t, t.TempDir())
			_, err := newMaterializer(dir)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrWorkDirUnsafe) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err %v, want ErrWorkDirUnsafe saying %q", err, tc.want)
			}
		})
	}
}

// Every call checks the work dir again and makes its own 0700 one.
func TestMaterializeChecksWorkDirEachCall(t *testing.T) {
	t.Parallel()
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "dev/x", "1", imagetest.DebootstrapLike(t))
	work := filepath.Join(t.TempDir(), "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	m, err := newMaterializer(work)
	if err != nil {
		t.Fatal(err)
	}
	var mode os.FileMode
	m.deps.Imager = imagerFunc(func(dir string) {
		if fi, err := os.Lstat(filepath.Dir(dir)); err == nil {
			mode = fi.Mode().Perm()
		}
	})
	if _, err := m.Materialize(context.Background(), Request{Ref: reg.Ref("dev/x", "1")}); err != nil {
		t.Fatal(err)
	}
	if mode != 0o700 {
		t.Errorf("the call's work dir was %v, want 0700", mode)
	}
	if err := os.Chmod(work, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Materialize(context.Background(), Request{Ref: reg.Ref("dev/x", "1")}); !errors.Is(err, ErrWorkDirUnsafe) {
		t.Fatalf("after chmod 0777: %v, want ErrWorkDirUnsafe", err)
	}
	assertEmpty(t, work)
}

// imagerFunc is a TreeImager that only looks at the tree.
type imagerFunc func(dir string)

func (f imagerFunc) TreeImage(_ context.Context, spec vmimage.TreeImageSpec) error {
	f(spec.Dir)
	return nil
}

// A docker-import of a debootstrap tree materializes into a real root filesystem
// without its device nodes and FIFO, and says so.
func TestMaterializeWarnsOfLeftOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "deboot/x", "1", imagetest.DebootstrapLike(t))
	res, err := f.materializer(t, f.imager).Materialize(context.Background(), Request{Ref: reg.Ref("deboot/x", "1")})
	if err != nil {
		t.Fatal(err)
	}
	want := "left out 9 device nodes and 1 FIFO, never created from an image: " + strings.Join(imagetest.DebootstrapLeftOut(), ", ") +
		"; the guest's /dev is devtmpfs"
	if len(res.Warnings) != 1 || !strings.HasPrefix(res.Warnings[0], want) {
		t.Errorf("warnings %q, want one starting %q", res.Warnings, want)
	}
	if res.RootFS.Size == 0 {
		t.Error("no root filesystem")
	}
	assertEmpty(t, f.work)
}

// findLibc looks inside the tree as the guest would: symlinks resolve in it, never
// on the coordinator (whose /usr has a glibc loader).
func TestFindLibcStaysInTheTree(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		links map[string]string
		files []string
		want  string
	}{
		{"loader through a usrmerge /lib64 symlink", map[string]string{"lib64": "usr/lib64"}, []string{"usr/lib64/ld-linux-x86-64.so.2"}, LibcGlibc},
		{"loader through an absolute /lib symlink", map[string]string{"lib": "/usr/lib"}, []string{"usr/lib/ld-musl-x86_64.so.1"}, LibcMusl},
		{"an absolute /usr symlink leads nowhere on the host", map[string]string{"usr": "/usr"}, nil, LibcNone},
		{"a /lib symlink climbing out of the tree", map[string]string{"lib": "/../../usr/lib"}, nil, LibcNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for l, target := range tc.links {
				if err := os.Symlink(target, filepath.Join(dir, l)); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tc.files {
				if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := findLibc(dir); got != tc.want {
				t.Errorf("libc %s, want %s", got, tc.want)
			}
		})
	}
}
