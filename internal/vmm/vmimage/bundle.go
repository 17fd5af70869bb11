package vmimage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// Bundle returns the cached read-only bundle disk (raw ext4) holding files,
// building it on first use. The guest mounts it at BundleMount.
func (b *Builder) Bundle(ctx context.Context, files []BundleFile) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	files = append([]BundleFile(nil), files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	k, sum := newKey("bundle")
	var total int64
	for _, f := range files {
		k.str(f.Name, f.Mode.String())
		if err := k.file(f.Source); err != nil {
			return "", fmt.Errorf("build bundle: %w", err)
		}
		if st, err := os.Stat(f.Source); err == nil {
			total += st.Size()
		}
	}
	p, ok := b.cached(sum() + ".ext4")
	if ok {
		return p, nil
	}
	stage, err := os.MkdirTemp(b.cfg.CacheDir, "bundle-stage-")
	if err != nil {
		return "", fmt.Errorf("build bundle: %w", err)
	}
	defer os.RemoveAll(stage)
	for _, f := range files {
		if err := copyFile(f.Source, filepath.Join(stage, f.Name), f.Mode); err != nil {
			return "", fmt.Errorf("build bundle: stage %s: %w", f.Name, err)
		}
	}
	size := max(32<<20, total*3/2+16<<20)
	err = writeAtomic(p, func(tmp string) error { return b.mkfsExt4(ctx, tmp, stage, "engrams", filepath.Base(p), size) })
	if err != nil {
		return "", fmt.Errorf("build bundle: %w", err)
	}
	b.log.Info("built bundle", "path", p, "files", len(files))
	return p, nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	if mode == 0 {
		mode = 0o644
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, mode)
}
