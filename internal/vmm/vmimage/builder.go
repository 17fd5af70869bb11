package vmimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// Config says where inputs come from and where results are cached. Zero
// values pick the host's defaults (newest /boot/vmlinuz-*, its modules,
// /bin/busybox, mkfs.ext4 and qemu-img from PATH).
type Config struct {
	CacheDir    string   // required: built artifacts, keyed by their inputs
	KernelImage string   // bzImage; default: newest /boot/vmlinuz-*
	ModulesDir  string   // default: /lib/modules/<kernel version>
	Modules     []string // module names to load in the guest; default DefaultModules
	InitBinary  string   // static engrams-init, required for Initramfs
	Busybox     string   // static busybox for the default root; default /bin/busybox
	RootFS      string   // "busybox" (default) or "debian" (debootstrap minbase)
	DebianSuite string   // default "bookworm"
	Mirror      string   // debootstrap mirror; default http://deb.debian.org/debian
	RootSizeMiB int      // virtual size of the root image; default 2048 (sparse)
	MkfsExt4    string   // default "mkfs.ext4"
	Debugfs     string   // default "debugfs" (stamps inode change times)
	QemuImg     string   // default "qemu-img"
	MkfsErofs   string   // default "mkfs.erofs" (the empty harness image)
}

// DefaultModules are the virtio drivers the Debian cloud kernel builds as
// modules; dependencies are added from modules.dep in load order.
var DefaultModules = []string{
	"virtio_mmio", "virtio_pci", "virtio_console", "virtio_blk", "virtio_net", "erofs",
}

// Deps are injected collaborators.
type Deps struct {
	Logger *slog.Logger
}

// Builder builds and caches images. Safe for concurrent use; artifacts are
// written to a temporary name and renamed, so concurrent processes sharing
// a cache directory are safe too.
type Builder struct {
	cfg Config
	log *slog.Logger
	mu  sync.Mutex
}

// BundleFile is one file placed on the read-only bundle disk.
type BundleFile struct {
	Name   string // path inside the bundle, e.g. "engrams-guest"
	Source string // host path
	Mode   os.FileMode
}

// Images is a complete set of boot artifacts.
type Images struct {
	KernelVersion string
	Kernel        string // uncompressed PVH vmlinux
	Initramfs     string // uncompressed newc cpio
	RootFS        string // raw ext4 base image, never written by guests
	Bundle        string // raw ext4 bundle image, attached read-only
	// Harness is the empty erofs image behind the harness disk of a
	// machine that runs no harness bundle (HarnessPlaceholder).
	Harness string
}

// New validates cfg and returns a Builder.
func New(cfg Config, deps Deps) (*Builder, error) {
	if cfg.CacheDir == "" {
		return nil, fmt.Errorf("new image builder: CacheDir is required")
	}
	if cfg.KernelImage == "" {
		k, err := newestKernel("/boot")
		if err != nil {
			return nil, fmt.Errorf("new image builder: %w", err)
		}
		cfg.KernelImage = k
	}
	if len(cfg.Modules) == 0 {
		cfg.Modules = DefaultModules
	}
	if cfg.Busybox == "" {
		cfg.Busybox = "/bin/busybox"
	}
	if cfg.RootFS == "" {
		cfg.RootFS = "busybox"
	}
	if cfg.DebianSuite == "" {
		cfg.DebianSuite = "bookworm"
	}
	if cfg.Mirror == "" {
		cfg.Mirror = "http://deb.debian.org/debian"
	}
	if cfg.RootSizeMiB == 0 {
		cfg.RootSizeMiB = 2048
	}
	if cfg.MkfsExt4 == "" {
		cfg.MkfsExt4 = "mkfs.ext4"
	}
	if cfg.QemuImg == "" {
		cfg.QemuImg = "qemu-img"
	}
	if cfg.MkfsErofs == "" {
		cfg.MkfsErofs = "mkfs.erofs"
	}
	if cfg.Debugfs == "" {
		cfg.Debugfs = "debugfs"
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("new image builder: create cache dir: %w", err)
	}
	return &Builder{cfg: cfg, log: log}, nil
}

// Build returns every artifact, building what is not cached yet.
func (b *Builder) Build(ctx context.Context, bundle []BundleFile) (Images, error) {
	var im Images
	var err error
	if im.Kernel, im.KernelVersion, err = b.Kernel(ctx); err != nil {
		return im, err
	}
	if im.Initramfs, err = b.Initramfs(ctx); err != nil {
		return im, err
	}
	if im.RootFS, err = b.RootImage(ctx); err != nil {
		return im, err
	}
	if im.Bundle, err = b.Bundle(ctx, bundle); err != nil {
		return im, err
	}
	if im.Harness, err = b.HarnessPlaceholder(ctx); err != nil {
		return im, err
	}
	return im, nil
}

// newestKernel picks the lexically greatest vmlinuz-* in dir.
func newestKernel(dir string) (string, error) {
	m, _ := filepath.Glob(filepath.Join(dir, "vmlinuz-*"))
	if len(m) == 0 {
		return "", fmt.Errorf("find kernel: no %s/vmlinuz-* (run scripts/install-deps.sh)", dir)
	}
	sort.Strings(m)
	return m[len(m)-1], nil
}

// hasher accumulates a cache key from strings and file contents.
type hasher struct{ h io.Writer }

func newKey(kind string) (*hasher, func() string) {
	s := sha256.New()
	fmt.Fprintf(s, "engrams-vmimage-v2\x00%s\x00", kind)
	return &hasher{s}, func() string { return kind + "-" + hex.EncodeToString(s.Sum(nil))[:24] }
}

func (k *hasher) str(parts ...string) {
	for _, p := range parts {
		fmt.Fprintf(k.h, "%d:%s\x00", len(p), p)
	}
}

// file adds a file's size and content, not its path: the same inputs give
// the same names on every host, wherever they are stored.
func (k *hasher) file(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	k.str(fmt.Sprint(st.Size()))
	_, err = io.Copy(k.h, f)
	return err
}

// cached returns the cache path for name and whether it already exists.
func (b *Builder) cached(name string) (string, bool) {
	p := filepath.Join(b.cfg.CacheDir, name)
	_, err := os.Stat(p)
	return p, err == nil
}

// writeAtomic creates dst by letting fill write a temporary file, records
// its content hash beside it (see ContentHash), then renames it into place.
func writeAtomic(dst string, fill func(tmp string) error) error {
	tmp := fmt.Sprintf("%s.tmp-%d", dst, os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := fill(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if _, err := ContentHash(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp+hashSuffix, dst+hashSuffix); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}
