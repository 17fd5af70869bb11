package imagetest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
)

const (
	user = "alice"
	pass = "s3cret-imagetest"
)

func newPuller() *oci.Puller {
	return oci.New(oci.Config{SkipOwnership: os.Geteuid() != 0}, oci.Deps{Dialer: netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})})
}

// pull pulls ref into a fresh directory; on error it checks nothing was left behind.
func pull(t *testing.T, ref string, auth oci.Credentials, requireShell bool) (*oci.Image, error) {
	t.Helper()
	parent := t.TempDir()
	target := filepath.Join(parent, "rootfs")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	img, err := newPuller().Pull(ctx, oci.Request{Ref: ref, Auth: auth, Target: target, RequireShell: requireShell})
	if err != nil {
		if ents, _ := os.ReadDir(parent); len(ents) > 0 {
			t.Errorf("failed pull left %d entries in %s", len(ents), parent)
		}
	}
	return img, err
}

// runIn runs argv chrooted into root (as root only) and returns its output.
func runIn(t *testing.T, root string, argv ...string) (string, bool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Logf("not root: not running %v inside the tree", argv)
		return "", false
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run %v in %s: %v\n%s", argv, root, err, out)
	}
	return string(out), true
}

type registryMode struct {
	name string
	opts imagetest.RegistryOptions
	auth oci.Credentials
}

// registryModes are the three ways a registry is served, with the right credentials.
func registryModes() []registryMode {
	return []registryMode{
		{"anonymous", imagetest.RegistryOptions{}, oci.Credentials{}},
		{"basic", imagetest.RegistryOptions{Auth: imagetest.BasicAuth, Username: user, Password: pass},
			oci.Credentials{Username: user, Password: pass}},
		{"bearer", imagetest.RegistryOptions{Auth: imagetest.BearerAuth, Username: user, Password: pass},
			oci.Credentials{Username: user, Password: pass}},
	}
}

func TestImagesRoundTrip(t *testing.T) {
	t.Parallel()
	tests := roundTripCases(t)
	for _, mode := range registryModes() {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			reg := imagetest.StartRegistry(t, mode.opts)
			for i, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					pullRoundTrip(t, reg, mode, fmt.Sprintf("test/img%d", i), tc)
				})
			}
		})
	}
}

// roundTripCase is an image pushed to a registry and pulled back.
type roundTripCase struct {
	name         string
	img          v1.Image
	requireShell bool
	want         error // nil: the pull succeeds
	check        func(t *testing.T, img *oci.Image)
}

// roundTripCases are the test images, the malicious ones included, with
// what pulling each must give.
func roundTripCases(t *testing.T) []roundTripCase {
	t.Helper()
	tests := []roundTripCase{
		{name: "busybox", img: imagetest.Busybox(t), requireShell: true, check: func(t *testing.T, img *oci.Image) {
			imagetest.TreeFacts{
				Symlinks: map[string]string{"bin/sh": "/bin/busybox", "usr/bin/awk": "/bin/busybox"},
				Dirs:     []string{"tmp", "proc", "sys", "dev"},
			}.Check(t, img.Dir)
			if !slices.Equal(img.Config.Cmd, []string{"/bin/sh"}) {
				t.Errorf("config cmd %q", img.Config.Cmd)
			}
			if out, ok := runIn(t, img.Dir, "/bin/sh", "-c", "echo $((6*7)); grep -c root /etc/passwd"); ok && out != "42\n1\n" {
				t.Errorf("busybox sh said %q", out)
			}
		}},
		{name: "multi-layer", img: imagetest.MultiLayer(t), requireShell: true, check: func(t *testing.T, img *oci.Image) {
			if len(img.Layers) != 4 {
				t.Errorf("%d layers, want 4", len(img.Layers))
			}
			imagetest.MultiLayerTree().Check(t, img.Dir)
		}},
		{name: "no shell", img: imagetest.NoShell(t), requireShell: true, want: oci.ErrNoShell},
		{name: "no shell, not required", img: imagetest.NoShell(t), check: func(t *testing.T, img *oci.Image) {
			if img.HasShell {
				t.Error("HasShell")
			}
			if !slices.Equal(img.Config.Entrypoint, []string{"/usr/local/bin/busybox", "echo"}) {
				t.Errorf("entrypoint %q", img.Config.Entrypoint)
			}
		}},
		{name: "alpine-like", img: imagetest.AlpineLike(t), requireShell: true, check: func(t *testing.T, img *oci.Image) {
			imagetest.TreeFacts{
				Files:    map[string]string{"etc/alpine-release": imagetest.AlpineRelease},
				Symlinks: map[string]string{"lib/libc.musl-x86_64.so.1": "ld-musl-x86_64.so.1"},
			}.Check(t, img.Dir)
			if fi, err := os.Lstat(filepath.Join(img.Dir, imagetest.MuslLoader)); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("%s: %v %v", imagetest.MuslLoader, fi, err)
			}
			if out, ok := runIn(t, img.Dir, imagetest.MuslHello); ok && out != imagetest.MuslHelloOutput {
				t.Errorf("%s said %q, want %q", imagetest.MuslHello, out, imagetest.MuslHelloOutput)
			}
		}},
	}
	for _, k := range imagetest.MaliciousKinds() {
		tests = append(tests, roundTripCase{name: "malicious " + string(k), img: imagetest.Malicious(t, k), want: oci.ErrUnsafeLayer})
	}
	tests = append(tests, roundTripCase{name: "debootstrap-like, docker import", img: imagetest.DebootstrapLike(t), requireShell: true,
		check: func(t *testing.T, img *oci.Image) {
			var names []string
			for _, l := range img.LeftOut {
				names = append(names, l.Name)
			}
			if !slices.Equal(names, imagetest.DebootstrapLeftOut()) {
				t.Errorf("left out %v, want %v", names, imagetest.DebootstrapLeftOut())
			}
			imagetest.TreeFacts{
				Symlinks: map[string]string{"dev/fd": "/proc/self/fd", "bin/sh": "/bin/busybox"},
				Dirs:     []string{"dev/pts", "dev/shm", "run"}, Absent: []string{"dev/null", "dev/console", "run/initctl"},
			}.Check(t, img.Dir)
		}})
	tests = append(tests, roundTripCase{name: "device node, left out", img: imagetest.Malicious(t, imagetest.DeviceNode),
		check: func(t *testing.T, img *oci.Image) {
			imagetest.TreeFacts{Dirs: []string{"dev"}, Absent: []string{"dev/mem"}}.Check(t, img.Dir)
			if want := []oci.LeftOut{{Name: "/dev/mem", Kind: oci.LeftOutCharDevice}}; !slices.Equal(img.LeftOut, want) {
				t.Errorf("left out %v, want %v", img.LeftOut, want)
			}
		}})
	return tests
}

// pullRoundTrip pushes tc's image to repo in reg and pulls it back with
// mode's credentials: a refusal must be tc.want with nothing escaped, a
// pull must give the pushed digest and pass tc.check.
func pullRoundTrip(t *testing.T, reg *imagetest.Registry, mode registryMode, repo string, tc roundTripCase) {
	t.Helper()
	digest := reg.Push(t, repo, "v1", tc.img)
	img, err := pull(t, reg.Ref(repo, "v1"), mode.auth, tc.requireShell)
	if tc.want != nil {
		if !errors.Is(err, tc.want) {
			t.Fatalf("pull: %v, want %v", err, tc.want)
		}
		t.Logf("refused: %v", err)
		if _, err := os.Lstat(filepath.Join("/tmp", imagetest.EscapeProbe)); !os.IsNotExist(err) {
			t.Errorf("/tmp/%s exists (err %v): a layer escaped", imagetest.EscapeProbe, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if img.Digest != digest {
		t.Errorf("digest %s, pushed %s", img.Digest, digest)
	}
	tc.check(t, img)
}

func TestWrongCredentials(t *testing.T) {
	t.Parallel()
	img := imagetest.Image(t, v1.Config{}, imagetest.Layer(t, imagetest.File("bin/sh", "#!fake\n", 0o755)))
	basic := imagetest.RegistryOptions{Auth: imagetest.BasicAuth, Username: user, Password: pass}
	bearer := imagetest.RegistryOptions{Auth: imagetest.BearerAuth, Username: user, Password: pass}
	tests := []struct {
		name  string
		opts  imagetest.RegistryOptions
		auth  func(*imagetest.Registry) oci.Credentials
		want  error
		token bool
	}{
		{"basic, right", basic, creds(user, pass), nil, false},
		{"basic, wrong password", basic, creds(user, "nope"), oci.ErrUnauthorized, false},
		{"basic, wrong user", basic, creds("mallory", pass), oci.ErrUnauthorized, false},
		{"basic, anonymous", basic, creds("", ""), oci.ErrUnauthorized, false},
		{"bearer, right", bearer, creds(user, pass), nil, false},
		{"bearer, wrong password", bearer, creds(user, "nope"), oci.ErrUnauthorized, false},
		{"bearer, anonymous", bearer, creds("", ""), oci.ErrUnauthorized, false},
		{"bearer, pre-issued token", bearer, func(r *imagetest.Registry) oci.Credentials {
			return oci.Credentials{Token: r.Token()}
		}, nil, true},
		{"bearer, wrong token", bearer, func(*imagetest.Registry) oci.Credentials {
			return oci.Credentials{Token: "imagetest-forged"}
		}, oci.ErrUnauthorized, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := imagetest.StartRegistry(t, tc.opts)
			reg.Push(t, "private/app", "v1", img)
			_, err := pull(t, reg.Ref("private/app", "v1"), tc.auth(reg), false)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("pull: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("pull: %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), pass) {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func creds(u, p string) func(*imagetest.Registry) oci.Credentials {
	return func(*imagetest.Registry) oci.Credentials { return oci.Credentials{Username: u, Password: p} }
}

func TestCorruptBlob(t *testing.T) {
	t.Parallel()
	img := imagetest.Image(t, v1.Config{},
		imagetest.Layer(t, imagetest.File("bin/sh", "#!fake\n", 0o755)),
		imagetest.Layer(t, imagetest.File("data", strings.Repeat("payload ", 4096), 0o644)))
	top := imagetest.LayerDigests(t, img)[1]
	tests := []struct {
		name    string
		corrupt func(*testing.T, *imagetest.Registry)
	}{
		{"bytes flipped", func(t *testing.T, r *imagetest.Registry) { r.CorruptBlob(t, top) }},
		{"truncated", func(t *testing.T, r *imagetest.Registry) { r.ReplaceBlob(t, top, []byte{0x1f, 0x8b}) }},
	}
	for _, mode := range registryModes() {
		for _, tc := range tests {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				reg := imagetest.StartRegistry(t, mode.opts)
				reg.Push(t, "test/corrupt", "v1", img)
				if _, err := pull(t, reg.Ref("test/corrupt", "v1"), mode.auth, false); err != nil {
					t.Fatalf("pull before corruption: %v", err)
				}
				tc.corrupt(t, reg)
				_, err := pull(t, reg.Ref("test/corrupt", "v1"), mode.auth, false)
				if !errors.Is(err, oci.ErrCorruptLayer) {
					t.Fatalf("pull: %v, want %v", err, oci.ErrCorruptLayer)
				}
				t.Logf("refused: %v", err)
			})
		}
	}
}

func TestDebian(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the Debian image takes 30-90 s to build the first time")
	}
	t.Parallel()
	start := time.Now()
	base := imagetest.Debian(t)
	t.Logf("Debian image ready in %s", time.Since(start).Round(time.Millisecond))
	plus := imagetest.DebianPlus(t, map[string]string{
		"etc/engrams-extra":           "rebuilt\n",
		"usr/local/bin/engrams-hello": "#!/bin/sh\necho hello from the extra layer\n",
	})
	bl, pl := imagetest.LayerDigests(t, base), imagetest.LayerDigests(t, plus)
	if len(bl) != 1 || len(pl) != 2 || pl[0] != bl[0] {
		t.Fatalf("layers: base %v, plus %v: want plus = base + one", bl, pl)
	}
	ls, err := base.Layers()
	if err != nil {
		t.Fatal(err)
	}
	size, err := ls[0].Size()
	if err != nil {
		t.Fatal(err)
	}
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{Auth: imagetest.BearerAuth, Username: user, Password: pass})
	auth := oci.Credentials{Username: user, Password: pass}
	start = time.Now()
	reg.Push(t, "debian", imagetest.DebianSuite, base)
	reg.Push(t, "debian", "plus", plus)
	t.Logf("pushed both (%.1f MB layer) in %s", float64(size)/1e6, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	img, err := pull(t, reg.Ref("debian", imagetest.DebianSuite), auth, true)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	t.Logf("pulled and flattened in %s: %.1f MB of files", time.Since(start).Round(time.Millisecond), float64(img.TreeBytes)/1e6)
	ver, err := os.ReadFile(filepath.Join(img.Dir, "etc/debian_version"))
	if err != nil || !bytes.HasPrefix(ver, []byte("12.")) {
		t.Errorf("etc/debian_version: %q %v", ver, err)
	}
	for _, dir := range []string{"dev", "proc", "sys", "var/lib/apt/lists"} {
		ents, err := os.ReadDir(filepath.Join(img.Dir, dir))
		if err != nil {
			t.Errorf("%s: %v", dir, err)
		}
		for _, e := range ents {
			if dir != "var/lib/apt/lists" || e.Name() != "partial" {
				t.Errorf("%s holds %s", dir, e.Name())
			}
		}
	}
	if debs, _ := filepath.Glob(filepath.Join(img.Dir, "var/cache/apt/archives/*.deb")); len(debs) > 0 {
		t.Errorf("%d .deb files left in var/cache/apt/archives", len(debs))
	}
	if out, ok := runIn(t, img.Dir, "/bin/sh", "-c", ". /etc/os-release; echo $VERSION_CODENAME; ldd --version | head -1"); ok {
		if !strings.HasPrefix(out, "bookworm\nldd (Debian GLIBC") {
			t.Errorf("inside the tree: %q", out)
		}
	}

	start = time.Now()
	img2, err := pull(t, reg.Ref("debian", "plus"), auth, true)
	if err != nil {
		t.Fatalf("pull plus: %v", err)
	}
	t.Logf("pulled DebianPlus in %s", time.Since(start).Round(time.Millisecond))
	imagetest.TreeFacts{Files: map[string]string{"etc/engrams-extra": "rebuilt\n"}}.Check(t, img2.Dir)
	if out, ok := runIn(t, img2.Dir, "/usr/local/bin/engrams-hello"); ok && out != "hello from the extra layer\n" {
		t.Errorf("engrams-hello said %q", out)
	}
}
