package vmimage

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// BundleMount is where the guest mounts the read-only bundle disk.
const BundleMount = initproto.BundleDir

// rootLayoutVersion changes whenever the files written below change.
const rootLayoutVersion = "5"

// wgetWrapper replaces busybox's wget applet in the default root: it runs
// `wget -T SECS` as `timeout SECS wget`, which Debian's busybox, built
// without wget's timeout, would segfault on (wget.sh says how).
//
//go:embed wget.sh
var wgetWrapper []byte

// busyboxProfile is the default root's /etc/profile. Debian's busybox sh
// runs its own applets before any file on PATH (FEATURE_SH_STANDALONE), so
// a login shell (a terminal, sh -l) reaches the wget wrapper through a
// function; a command run without a shell finds it on PATH. A plain
// `sh -c 'wget -T …'` still runs the applet: only a busybox built with
// FEATURE_WGET_TIMEOUT would mend that.
const busyboxProfile = `# engrams default root
wget() { /usr/bin/wget "$@"; }
`

// RootImage returns the cached raw ext4 base root filesystem, building it
// on first use. Guests never write it: each machine gets an Overlay.
func (b *Builder) RootImage(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	k, sum := newKey("rootfs-" + b.cfg.RootFS)
	k.str(rootLayoutVersion, fmt.Sprint(b.cfg.RootSizeMiB))
	switch b.cfg.RootFS {
	case "busybox":
		if err := k.file(b.cfg.Busybox); err != nil {
			return "", fmt.Errorf("build root image: busybox: %w", err)
		}
	case "debian":
		k.str(b.cfg.DebianSuite, b.cfg.Mirror)
	default:
		return "", fmt.Errorf("build root image: unknown kind %q (busybox|debian)", b.cfg.RootFS)
	}
	p, ok := b.cached(sum() + ".ext4")
	if ok {
		return p, nil
	}
	stage, err := os.MkdirTemp(b.cfg.CacheDir, "rootfs-stage-")
	if err != nil {
		return "", fmt.Errorf("build root image: %w", err)
	}
	defer os.RemoveAll(stage)
	if b.cfg.RootFS == "debian" {
		err = b.stageDebian(ctx, stage)
	} else {
		err = b.stageBusybox(ctx, stage)
	}
	if err == nil {
		err = stageCommon(stage)
	}
	if err != nil {
		return "", fmt.Errorf("build root image: %w", err)
	}
	err = writeAtomic(p, func(tmp string) error {
		return b.mkfsExt4(ctx, tmp, stage, "root", filepath.Base(p), int64(b.cfg.RootSizeMiB)<<20)
	})
	if err != nil {
		return "", fmt.Errorf("build root image: %w", err)
	}
	b.log.Info("built root image", "kind", b.cfg.RootFS, "path", p)
	return p, nil
}

// stageBusybox lays out a busybox-static system: every applet is a symlink.
func (b *Builder) stageBusybox(ctx context.Context, root string) error {
	out, err := exec.CommandContext(ctx, b.cfg.Busybox, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("list busybox applets: %w", err)
	}
	data, err := os.ReadFile(b.cfg.Busybox)
	if err != nil {
		return fmt.Errorf("read busybox: %w", err)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "etc/profile"), []byte(busyboxProfile), 0o644); err != nil {
		return err
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "bin/busybox" {
			continue
		}
		dst := filepath.Join(root, a)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Symlink("/bin/busybox", dst); err != nil && !os.IsExist(err) {
			return err
		}
		if filepath.Base(a) == "wget" {
			if err := os.Remove(dst); err != nil {
				return err
			}
			if err := os.WriteFile(dst, wgetWrapper, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// stageDebian runs debootstrap --variant=minbase into root (needs root and network).
func (b *Builder) stageDebian(ctx context.Context, root string) error {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "debootstrap", "--variant=minbase", b.cfg.DebianSuite, root, b.cfg.Mirror)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debootstrap: %w: %s", err, tail(stderr.String(), 500))
	}
	for _, g := range []string{"var/cache/apt/archives/*.deb", "var/cache/apt/*.bin", "var/lib/apt/lists/*"} {
		m, _ := filepath.Glob(filepath.Join(root, g))
		for _, f := range m {
			_ = os.RemoveAll(f)
		}
	}
	return nil
}

// stageCommon adds the files and mount points every root needs.
func stageCommon(root string) error {
	dirs := map[string]os.FileMode{
		"proc": 0o555, "sys": 0o555, "dev": 0o755, "run": 0o755, "root": 0o700,
		"tmp": 0o1777, "var/tmp": 0o1777, "var/log": 0o755, "etc": 0o755,
		"home": 0o755, strings.TrimPrefix(BundleMount, "/"): 0o755,
	}
	for d, m := range dirs {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if err := os.Chmod(p, m); err != nil {
			return err
		}
	}
	files := map[string]string{
		"etc/hostname":    "engrams\n",
		"etc/hosts":       "127.0.0.1 localhost\n::1 localhost\n",
		"etc/resolv.conf": "nameserver 10.0.2.3\n",
	}
	if _, err := os.Stat(filepath.Join(root, "etc/passwd")); err != nil {
		files["etc/passwd"] = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
		files["etc/group"] = "root:x:0:\nnogroup:x:65534:\n"
		files["etc/shadow"] = "root:*:19000:0:99999:7:::\n"
		files["etc/os-release"] = "NAME=\"engrams busybox\"\nID=busybox\nPRETTY_NAME=\"engrams minimal (busybox)\"\n"
	}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// mkfsExt4 creates a sparse ext4 image of size bytes populated from dir,
// without mounting anything. Its UUID and hash seed derive from seed, and
// every time stamp is buildEpoch, so equal inputs give equal bytes (given
// the same mke2fs: 1.47.0 copies each directory's entries sorted by name,
// whatever order the host lists them in).
func (b *Builder) mkfsExt4(ctx context.Context, img, dir, label, seed string, size int64) error {
	if err := normalizeTimes(dir); err != nil {
		return err
	}
	if err := sparseFile(img, size); err != nil {
		return err
	}
	var out bytes.Buffer
	uuid := fsUUID(seed)
	cmd := exec.CommandContext(ctx, b.cfg.MkfsExt4, "-q", "-F", "-L", label, "-U", uuid,
		"-E", "root_owner=0:0,hash_seed="+uuid, "-d", dir, img)
	cmd.Env = append(os.Environ(), fakeTime)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, tail(out.String(), 500))
	}
	return b.stampChangeTimes(ctx, img, dir)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
