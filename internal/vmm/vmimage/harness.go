package vmimage

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// placeholderUUID is the empty harness image's file system UUID (fixed:
// mkfs.erofs would pick a random one).
const placeholderUUID = "6e67726d-0000-4000-8000-6861726e6573"

// HarnessPlaceholder returns the cached empty erofs image a machine's
// harness disk carries when it runs no harness bundle, building it on
// first use. Its bytes depend only on the mkfs.erofs version: every time
// and the UUID are pinned and the root directory is root's, mode 0755.
func (b *Builder) HarnessPlaceholder(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	args := []string{"-T", strconv.FormatInt(buildEpoch.Unix(), 10), "--all-root", "-x", "-1", "-U", placeholderUUID}
	k, sum := newKey("harness-placeholder")
	k.str(args...)
	p, ok := b.cached(sum() + ".erofs")
	if ok {
		return p, nil
	}
	stage, err := os.MkdirTemp(b.cfg.CacheDir, "harness-stage-")
	if err != nil {
		return "", fmt.Errorf("build harness placeholder: %w", err)
	}
	defer os.RemoveAll(stage)
	if err := os.Chmod(stage, 0o755); err != nil {
		return "", fmt.Errorf("build harness placeholder: %w", err)
	}
	err = writeAtomic(p, func(tmp string) error {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, b.cfg.MkfsErofs, append(args, tmp, stage)...)
		// With SOURCE_DATE_EPOCH set, mkfs.erofs keeps older times than -T.
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") })
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("mkfs.erofs: %w: %s", err, tail(out.String(), 500))
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("build harness placeholder: %w", err)
	}
	b.log.Info("built harness placeholder", "path", p)
	return p, nil
}
