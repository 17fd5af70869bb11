package vmimage

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// ModuleListPath is where the initramfs lists module files in load order,
// one absolute path per line; stage-1 init loads them with finit_module.
const ModuleListPath = initproto.ModuleList

// Initramfs returns the cached uncompressed cpio holding InitBinary as /init
// and the configured modules, building it on first use.
func (b *Builder) Initramfs(ctx context.Context) (string, error) {
	if b.cfg.InitBinary == "" {
		return "", fmt.Errorf("build initramfs: InitBinary is not configured")
	}
	_, version, err := b.Kernel(ctx)
	if err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	dir := b.cfg.ModulesDir
	if dir == "" {
		dir = filepath.Join("/lib/modules", version)
	}
	mods, err := ResolveModules(dir, b.cfg.Modules)
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	k, sum := newKey("initramfs")
	k.str(version)
	if err := k.file(b.cfg.InitBinary); err != nil {
		return "", fmt.Errorf("build initramfs: hash init: %w", err)
	}
	for _, m := range mods {
		k.str(m.Name)
		if err := k.file(filepath.Join(dir, m.Path)); err != nil {
			return "", fmt.Errorf("build initramfs: hash module: %w", err)
		}
	}
	p, ok := b.cached(sum() + ".cpio")
	if ok {
		return p, nil
	}
	err = writeAtomic(p, func(tmp string) error { return b.writeInitramfs(ctx, tmp, dir, mods) })
	if err != nil {
		return "", fmt.Errorf("build initramfs: %w", err)
	}
	b.log.Info("built initramfs", "path", p, "modules", len(mods))
	return p, nil
}

func (b *Builder) writeInitramfs(ctx context.Context, tmp, dir string, mods []Module) error {
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer f.Close()
	w := NewCPIOWriter(f)
	for _, d := range []string{"/dev", "/proc", "/sys", "/tmp", "/newroot", "/lib/modules", "/etc/engrams"} {
		if err := w.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := w.CharDev("/dev/console", 0o600, 5, 1); err != nil {
		return err
	}
	if err := w.CharDev("/dev/null", 0o666, 1, 3); err != nil {
		return err
	}
	init, err := os.ReadFile(b.cfg.InitBinary)
	if err != nil {
		return fmt.Errorf("read init: %w", err)
	}
	if err := w.File("/init", 0o755, init); err != nil {
		return err
	}
	var list []string
	for _, m := range mods {
		data, err := readModule(ctx, filepath.Join(dir, m.Path))
		if err != nil {
			return err
		}
		dst := path.Join("/lib/modules", m.Name+".ko")
		if err := w.File(dst, 0o644, data); err != nil {
			return err
		}
		list = append(list, dst)
	}
	if err := w.File(ModuleListPath, 0o644, []byte(strings.Join(list, "\n")+"\n")); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return f.Close()
}
