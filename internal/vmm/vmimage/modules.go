package vmimage

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// Module is one kernel module resolved from modules.dep.
type Module struct {
	Name string // e.g. "virtio_blk"
	Path string // relative to the modules dir, e.g. kernel/drivers/block/virtio_blk.ko.xz
}

// ResolveModules returns names and their dependencies in load order
// (dependencies first, each once) from dir/modules.dep. Names that are
// built into the kernel (listed in modules.builtin) are skipped.
func ResolveModules(dir string, names []string) ([]Module, error) {
	deps, err := readModulesDep(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if data, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(data)) {
			builtin[moduleName(l)] = true
		}
	}
	byName := map[string]string{}
	for p := range deps {
		byName[moduleName(p)] = p
	}
	var out []Module
	seen := map[string]bool{}
	var visit func(p string)
	visit = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		// modules.dep lists transitive deps, most-depended-on last.
		d := deps[p]
		for i := len(d) - 1; i >= 0; i-- {
			visit(d[i])
		}
		out = append(out, Module{Name: moduleName(p), Path: p})
	}
	for _, n := range names {
		n = strings.ReplaceAll(n, "-", "_")
		p, ok := byName[n]
		if !ok {
			if builtin[n] {
				continue
			}
			return nil, fmt.Errorf("module %s: not in %s/modules.dep", n, dir)
		}
		visit(p)
	}
	return out, nil
}

func readModulesDep(file string) (map[string][]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read modules.dep: %w", err)
	}
	deps := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
	}
	return deps, sc.Err()
}

// moduleName turns kernel/drivers/block/virtio_blk.ko.xz into virtio_blk.
func moduleName(p string) string {
	b := path.Base(p)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}

// readModule returns the uncompressed module, decompressing .ko.xz, .ko.zst
// and .ko.gz with the host's xz, zstd or gzip tools.
func readModule(ctx context.Context, file string) ([]byte, error) {
	var tool []string
	switch {
	case strings.HasSuffix(file, ".ko"):
		return os.ReadFile(file)
	case strings.HasSuffix(file, ".ko.xz"):
		tool = []string{"xz", "-dc"}
	case strings.HasSuffix(file, ".ko.zst"):
		tool = []string{"zstd", "-dcq"}
	case strings.HasSuffix(file, ".ko.gz"):
		tool = []string{"gzip", "-dc"}
	default:
		return nil, fmt.Errorf("module %s: unknown compression", file)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, tool[0], append(tool[1:], file)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w: %s", file, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
