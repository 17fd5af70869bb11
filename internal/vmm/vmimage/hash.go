package vmimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// hashSuffix names the file beside an artifact that caches its content hash.
const hashSuffix = ".sha256"

// ContentHash returns the hex SHA-256 of the file at p. Built artifacts are
// content-addressed by their inputs; this hash is what a snapshot records,
// so a restore on another host can check its own copy is the same bytes.
// The hash is cached in p+".sha256" (with the size and modification time
// it was computed for) and recomputed when the file changed.
func ContentHash(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	stamp := fmt.Sprintf("%d %d", st.Size(), st.ModTime().UnixNano())
	if b, err := os.ReadFile(p + hashSuffix); err == nil {
		if sum, rest, ok := strings.Cut(strings.TrimSpace(string(b)), " "); ok && rest == stamp && len(sum) == 64 {
			return sum, nil
		}
	}
	f, err := os.Open(p)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", p, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	// Best effort: a read-only cache still answers, only slower.
	_ = os.WriteFile(p+hashSuffix, []byte(sum+" "+stamp+"\n"), 0o644)
	return sum, nil
}

// buildEpoch is the time stamped on every file of a built filesystem image,
// so the same inputs give the same bytes on every host.
var buildEpoch = time.Unix(1_700_000_000, 0)

// normalizeTimes sets the access and modification times of every entry
// under root (symlinks themselves included) to buildEpoch.
func normalizeTimes(root string) error {
	ts := []unix.Timespec{unix.NsecToTimespec(buildEpoch.UnixNano()), unix.NsecToTimespec(buildEpoch.UnixNano())}
	return filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("set times of %s: %w", p, err)
		}
		return nil
	})
}

// fsUUID derives a stable filesystem UUID from seed.
func fsUUID(seed string) string {
	h := sha256.Sum256([]byte("engrams-fs-uuid\x00" + seed))
	h[6] = h[6]&0x0f | 0x40 // version 4 layout, deterministic content
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

var fakeTime = "E2FSPROGS_FAKE_TIME=" + strconv.FormatInt(buildEpoch.Unix(), 10)

// stampChangeTimes sets the change time of every inode mke2fs copied from
// dir to buildEpoch (mke2fs copies each source file's ctime, which no
// system call can set) with a debugfs script. A build by a user other than
// root also gets root ownership, as a build by root has.
func (b *Builder) stampChangeTimes(ctx context.Context, img, dir string) error {
	stamp := buildEpoch.UTC().Format("20060102150405")
	chown := os.Geteuid() != 0
	var script strings.Builder
	err := eachImagePath(dir, func(name string) {
		fmt.Fprintf(&script, "sif \"%s\" ctime %s\n", name, stamp)
		if chown {
			fmt.Fprintf(&script, "sif \"%s\" uid 0\nsif \"%s\" gid 0\n", name, name)
		}
	})
	if err == nil {
		err = b.runDebugfs(ctx, img, script.String())
	}
	if err != nil {
		return fmt.Errorf("stamp change times: %w", err)
	}
	return nil
}

// eachImagePath calls fn with the image path ("/", "/etc/passwd") of every
// entry under dir, skipping names a debugfs script cannot quote (their
// inodes keep what mke2fs gave them; the image is still valid).
func eachImagePath(dir string, fn func(name string)) error {
	return filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		name := "/" + filepath.ToSlash(rel)
		if rel == "." {
			name = "/"
		}
		if !strings.ContainsAny(name, "\"\n\\") {
			fn(name)
		}
		return nil
	})
}

// runDebugfs runs a debugfs script (written to a temporary file beside
// img) against img, read-write, under the build's fake time.
func (b *Builder) runDebugfs(ctx context.Context, img, script string) error {
	f, err := os.CreateTemp(filepath.Dir(img), ".debugfs-*.txt")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(script); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.cfg.Debugfs, "-w", "-f", f.Name(), img)
	cmd.Env = append(os.Environ(), fakeTime)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("debugfs: %w: %s", err, tail(out.String(), 500))
	}
	return nil
}
