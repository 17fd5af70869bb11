package harness

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// Built-in harnesses.
const (
	BuiltinClaudeCode = "claude-code"
	BuiltinCodex      = "codex"
	BuiltinShell      = "shell"
)

// ErrUnknownBuiltin: no built-in harness has that name (or version, for shell).
var ErrUnknownBuiltin = errors.New("unknown built-in harness")

// Builtins lists the built-in harness names, sorted.
func Builtins() []string { return []string{BuiltinClaudeCode, BuiltinCodex, BuiltinShell} }

// BuiltinSpec says which built-in harness to assemble.
type BuiltinSpec struct {
	Name string // Builtin*
	// Version is the npm package's exact version or dist-tag; "" means
	// "latest". The shell harness has one version, ShellVersion.
	Version string
	// Libc picks claude-code's native build: LibcGlibc (default) or LibcMusl.
	// Other harnesses refuse anything but "".
	Libc string
	// Compression is passed to Build (BuildSpec.Compression).
	Compression string
}

// BuildBuiltin assembles a built-in harness in a staging tree under
// WorkDir (StageBuiltin) and builds its bundle; the tree is removed.
// Downloads are kept, verified, in CacheDir.
func (b *Builder) BuildBuiltin(ctx context.Context, spec BuiltinSpec) (Bundle, error) {
	stage, err := os.MkdirTemp(b.cfg.WorkDir, ".stage-"+spec.Name+"-")
	if err != nil {
		return Bundle{}, fmt.Errorf("build built-in harness %s: %w", spec.Name, err)
	}
	defer os.RemoveAll(stage)
	if _, err := b.StageBuiltin(ctx, spec, stage); err != nil {
		return Bundle{}, err
	}
	bundle, err := b.Build(ctx, BuildSpec{Dir: stage, Compression: spec.Compression})
	if err != nil {
		return Bundle{}, fmt.Errorf("build built-in harness %s: %w", spec.Name, err)
	}
	return bundle, nil
}

// StageBuiltin assembles the tree of a built-in harness, harness.json
// included, in dir (created if absent; it must be empty), ready for Build.
// Entrypoints run from dir as they will from MountPoint.
func (b *Builder) StageBuiltin(ctx context.Context, spec BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error) {
	start := time.Now()
	d, err := b.stageBuiltin(ctx, spec, dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("stage built-in harness %s@%s: %w", spec.Name, spec.Version, err)
	}
	b.log.Info("built-in harness staged", "name", d.Name, "version", d.Version, "dir", dir, "took", time.Since(start))
	return d, nil
}

func (b *Builder) stageBuiltin(ctx context.Context, spec BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error) {
	if !slices.Contains(Builtins(), spec.Name) {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: %q (built in: %v)", ErrUnknownBuiltin, spec.Name, Builtins())
	}
	if spec.Libc != "" && (spec.Name != BuiltinClaudeCode || (spec.Libc != guestapi.LibcGlibc && spec.Libc != guestapi.LibcMusl)) {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: libc %q: only claude-code has builds to choose from (glibc or musl)", ErrUnknownBuiltin, spec.Libc)
	}
	if spec.Name != BuiltinShell && b.cfg.CacheDir == "" {
		return guestapi.HarnessDescriptor{}, errors.New("Config.CacheDir is required to fetch npm packages")
	}
	if err := emptyDir(dir); err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	var d guestapi.HarnessDescriptor
	var err error
	switch spec.Name {
	case BuiltinShell:
		d, err = stageShell(spec, dir)
	case BuiltinClaudeCode:
		d, err = b.stageClaude(ctx, spec, dir)
	case BuiltinCodex:
		d, err = b.stageCodex(ctx, spec, dir)
	}
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	if err := normalizeModes(dir); err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	return d, writeDescriptor(dir, d)
}

// normalizeModes gives every directory of a staged tree mode 0755 and every
// file 0755 or 0644 (any execute bit or none), whatever the umask was.
func normalizeModes(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() || info.Mode()&0o111 != 0 {
			mode = 0o755
		}
		if info.Mode().Perm() == mode && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) == 0 {
			return nil
		}
		return os.Chmod(p, mode)
	})
}

// emptyDir creates dir, or checks that it is an empty directory.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("staging dir %s is not empty", dir)
	}
	return nil
}

// writeDescriptor writes d as dir/harness.json.
func writeDescriptor(dir string, d guestapi.HarnessDescriptor) error {
	data, err := d.Marshal()
	if err != nil {
		return err
	}
	p := filepath.Join(dir, guestapi.HarnessDescriptorFile)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		return err
	}
	return os.Chmod(p, 0o644)
}

// ShellVersion is the shell harness's only version.
const ShellVersion = "1"

//go:embed shell-harness.sh
var shellScript []byte

// ShellEntrypoint is the shell harness's script in its bundle.
const ShellEntrypoint = "bin/engrams-shell-harness"

func stageShell(spec BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error) {
	if spec.Version != "" && spec.Version != "latest" && spec.Version != ShellVersion {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: shell has only version %s, not %q", ErrUnknownBuiltin, ShellVersion, spec.Version)
	}
	p := filepath.Join(dir, filepath.FromSlash(ShellEntrypoint))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	if err := os.WriteFile(p, shellScript, 0o755); err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	return guestapi.HarnessDescriptor{
		Format: guestapi.HarnessDescriptorFormat, Name: BuiltinShell, Version: ShellVersion,
		Entrypoint: []string{ShellEntrypoint}, Protocol: guestapi.HarnessProtocolShell,
		Requires: guestapi.HarnessRequires{Libc: guestapi.LibcNone},
	}, nil
}

// requiresOf is what the executable ELF programs under dir need together:
// the C library of any dynamic one (glibc and musl together are refused),
// the newest glibc any needs, and every other library any needs. Shared
// objects without a loader of their own (.so, .node) are not counted.
func requiresOf(dir string) (guestapi.HarnessRequires, error) {
	r := guestapi.HarnessRequires{Libc: guestapi.LibcNone}
	libs := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil || info.Mode()&0o111 == 0 {
			return err
		}
		if ok, err := isELF(p); err != nil || !ok {
			return err
		}
		bi, err := inspectELF(p)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnsupportedPackage, err)
		}
		if bi.Libc == guestapi.LibcNone {
			return nil
		}
		if r.Libc != guestapi.LibcNone && r.Libc != bi.Libc {
			return fmt.Errorf("%w: %s needs %s, other programs %s", ErrUnsupportedPackage, p, bi.Libc, r.Libc)
		}
		r.Libc = bi.Libc
		if bi.GlibcMin != "" && (r.GlibcMin == "" || guestapi.CompareVersions(bi.GlibcMin, r.GlibcMin) > 0) {
			r.GlibcMin = bi.GlibcMin
		}
		for _, l := range bi.Libs {
			libs[l] = true
		}
		return nil
	})
	if err != nil {
		return guestapi.HarnessRequires{}, fmt.Errorf("inspect programs: %w", err)
	}
	for l := range libs {
		r.Libs = append(r.Libs, l)
	}
	slices.Sort(r.Libs)
	return r, nil
}
