package harnessreg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/store"
)

// HarnessBuilder stages built-in harnesses and packs trees into bundles
// (harness.Builder does).
type HarnessBuilder interface {
	StageBuiltin(ctx context.Context, spec harness.BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error)
	Build(ctx context.Context, spec harness.BuildSpec) (harness.Bundle, error)
}

// ChunkPutter stores a file's chunks in the blob store (chunk.Store does,
// with chunk.DiskChunkSize).
type ChunkPutter interface {
	PutFile(ctx context.Context, path string) (chunk.Manifest, chunk.PutStats, error)
}

// HarnessView is a registered harness with its descriptor decoded.
type HarnessView struct {
	Harness    domain.Harness
	Descriptor guestapi.HarnessDescriptor
	SizeBytes  int64 // the bundle image's size
}

// BuildHarnessRequest asks for a built-in harness.
type BuildHarnessRequest struct {
	Name    string // harness.Builtin*
	Version string // exact version or npm dist-tag; "" = latest
	Libc    string // claude-code only: "" or glibc (default), musl
}

// muslSuffix marks the version of a claude-code bundle built for musl, so
// both builds of one release can be registered ((name, version) is unique).
const muslSuffix = "-musl"

var harnessVersionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// harnessRegistry builds bundles and removes their files once stored.
type harnessRegistry struct {
	builder HarnessBuilder
	chunks  ChunkPutter
	workDir string

	mu       sync.Mutex
	inflight int             // builds running now
	finished map[string]bool // bundle files to remove once no build runs (another may be renaming onto one)
	swept    sync.Once       // stale trees of a process that died are removed before the first build
}

// staleTreeAge: a work tree this old was left by a process that died
// mid-build.
const staleTreeAge = 6 * time.Hour

// Work trees are named by these prefixes: in a configured work dir, and
// directly in the system's temporary directory when none is configured.
const (
	treePrefix    = ".harness-"
	tmpTreePrefix = "engrams-harness-"
)

// sweepStale removes the work trees in dir (named prefix*) older than
// staleTreeAge.
func sweepStale(dir, prefix string, now time.Time) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasPrefix(e.Name(), prefix) && now.Sub(info.ModTime()) > staleTreeAge {
			removeTree(filepath.Join(dir, e.Name()))
		}
	}
}

func newHarnessRegistry(b HarnessBuilder, cs ChunkPutter, workDir string) *harnessRegistry {
	return &harnessRegistry{builder: b, chunks: cs, workDir: workDir, finished: map[string]bool{}}
}

// treeDir makes a fresh private directory (os.MkdirTemp: random name, 0700)
// for one work tree, in the configured work dir (created 0700) or else the
// system's temporary directory. Either must be safe (checkPrivateDir), so
// no other user can swap a tree while it is packed.
func (r *harnessRegistry) treeDir(now time.Time) (string, error) {
	dir, prefix := r.workDir, treePrefix
	if dir == "" {
		dir, prefix = os.TempDir(), tmpTreePrefix
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create harness work dir: %w", err)
	}
	if err := checkPrivateDir(dir); err != nil {
		return "", fmt.Errorf("check harness work dir: %w", err)
	}
	r.swept.Do(func() { sweepStale(dir, prefix, now) })
	tmp, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		return "", fmt.Errorf("create harness work tree: %w", err)
	}
	return tmp, nil
}

// checkPrivateDir refuses dir unless no other user can replace what is in
// it: dir and every directory above it are owned by this user or root and
// writable by no one else, unless sticky (like /tmp).
func checkPrivateDir(dir string) error {
	real, err := filepath.EvalSymlinks(dir)
	if err == nil {
		real, err = filepath.Abs(real)
	}
	if err != nil {
		return fmt.Errorf("resolve %s: %w", dir, err)
	}
	uid := os.Getuid()
	for p := real; ; p = filepath.Dir(p) {
		info, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("check %s: %w", p, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		switch {
		case !ok:
			return fmt.Errorf("check %s: its owner is unknown", p)
		case int(st.Uid) != uid && st.Uid != 0:
			return fmt.Errorf("%s is owned by uid %d, neither this user (uid %d) nor root: use a directory only this user can change", p, st.Uid, uid)
		case info.Mode().Perm()&0o022 != 0 && info.Mode()&os.ModeSticky == 0:
			return fmt.Errorf("%s is writable by other users (mode %v): use a directory only this user can change", p, info.Mode().Perm())
		}
		if filepath.Dir(p) == p {
			return nil
		}
	}
}

func (r *harnessRegistry) available() error {
	if r == nil || r.builder == nil || r.chunks == nil {
		return fmt.Errorf("%w: this server has no blob store, so it cannot store harness bundles (start it with --blob-dir or --s3-endpoint)", domain.ErrInvalid)
	}
	return nil
}

func (r *harnessRegistry) begin() {
	r.mu.Lock()
	r.inflight++
	r.mu.Unlock()
}

// end records bundle (if any) as done and removes every finished bundle
// file when no other build is running.
func (r *harnessRegistry) end(bundle string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	if bundle != "" {
		r.finished[bundle] = true
	}
	if r.inflight > 0 {
		return
	}
	for p := range r.finished {
		_ = os.Remove(p)
		delete(r.finished, p)
	}
}

// BuildHarness builds a built-in harness (from npm, cached; shell needs no
// network), stores its bundle's chunks and registers it. An exact version
// already registered answers at once; registering the same bundle again is
// idempotent. It may take minutes.
func (c *Registry) BuildHarness(ctx context.Context, req BuildHarnessRequest) (HarnessView, error) {
	if err := checkBuiltinRequest(req); err != nil {
		return HarnessView{}, err
	}
	if err := c.harnessReg.available(); err != nil {
		return HarnessView{}, err
	}
	if exactVersion(req.Version) {
		version := req.Version
		if req.Libc == guestapi.LibcMusl {
			version += muslSuffix
		}
		v, found, err := c.registeredBuiltin(ctx, req.Name, version)
		if found || err != nil {
			return v, err
		}
	}
	spec := harness.BuiltinSpec{Name: req.Name, Version: req.Version, Libc: req.Libc}
	v, err := c.registerTree(ctx, true, func(dir string) error {
		d, err := c.harnessReg.builder.StageBuiltin(ctx, spec, dir)
		if err != nil || req.Libc != guestapi.LibcMusl {
			return err
		}
		d.Version += muslSuffix
		data, err := d.Marshal()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, guestapi.HarnessDescriptorFile), data, 0o644)
	})
	if err != nil {
		return HarnessView{}, harnessError(err)
	}
	return v, nil
}

func checkBuiltinRequest(req BuildHarnessRequest) error {
	if !slices.Contains(harness.Builtins(), req.Name) {
		return fmt.Errorf("%w: %q is not a built-in harness: built in are %s (add your own with `engrams harness add DIR`)",
			domain.ErrInvalid, req.Name, strings.Join(harness.Builtins(), ", "))
	}
	if req.Version != "" && !harnessVersionRE.MatchString(req.Version) {
		return fmt.Errorf("%w: version %q: want an exact version such as 2.1.3 or an npm dist-tag such as latest", domain.ErrInvalid, req.Version)
	}
	switch {
	case req.Libc == "":
	case req.Name != harness.BuiltinClaudeCode:
		return fmt.Errorf("%w: libc %q: only claude-code has builds to choose from", domain.ErrInvalid, req.Libc)
	case req.Libc != guestapi.LibcGlibc && req.Libc != guestapi.LibcMusl:
		return fmt.Errorf("%w: libc %q: want %s or %s", domain.ErrInvalid, req.Libc, guestapi.LibcGlibc, guestapi.LibcMusl)
	}
	return nil
}

// exactVersion tells an exact version ("2.1.3", "1") from a dist-tag.
func exactVersion(v string) bool { return v != "" && v[0] >= '0' && v[0] <= '9' }

// registeredBuiltin returns name@version if registered as a built-in.
func (c *Registry) registeredBuiltin(ctx context.Context, name, version string) (HarnessView, bool, error) {
	h, err := c.st.FindHarness(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return HarnessView{}, false, nil
	}
	if err != nil {
		return HarnessView{}, false, fmt.Errorf("find harness %s@%s: %w", name, version, err)
	}
	if !h.Builtin {
		return HarnessView{}, true, fmt.Errorf("%w: %s@%s is registered as a custom harness (added with `engrams harness add`)", store.ErrConflict, name, version)
	}
	v, err := harnessView(h)
	return v, true, err
}

// AddHarness registers a custom harness from a tar (or gzip-compressed
// tar) of a directory holding harness.json at its root.
func (c *Registry) AddHarness(ctx context.Context, tarball io.Reader) (HarnessView, error) {
	if err := c.harnessReg.available(); err != nil {
		return HarnessView{}, err
	}
	v, err := c.registerTree(ctx, false, func(dir string) error {
		if err := unpackTree(tarball, dir); err != nil {
			return err
		}
		d, err := guestapi.LoadHarnessDescriptor(dir)
		if err != nil {
			return err
		}
		if slices.Contains(harness.Builtins(), d.Name) {
			return fmt.Errorf("%w: %q is a built-in harness's name: build it with `engrams harness build %s`, or give yours another name",
				domain.ErrInvalid, d.Name, d.Name)
		}
		return nil
	})
	if err != nil {
		return HarnessView{}, harnessError(err)
	}
	return v, nil
}

// harnessError marks the harness package's refusals as invalid requests,
// so their message reaches the caller as a 400.
func harnessError(err error) error {
	for _, e := range []error{harness.ErrUnknownBuiltin, harness.ErrNotFound, harness.ErrUnsupportedPackage,
		guestapi.ErrInvalidHarnessDescriptor, harness.ErrInvalidTree, guestapi.ErrHarnessIncompatible} {
		if errors.Is(err, e) && !errors.Is(err, domain.ErrInvalid) {
			return fmt.Errorf("%w: %w", domain.ErrInvalid, err)
		}
	}
	return err
}

// registerTree stages a tree with stage (into an empty directory), builds
// its bundle, stores the bundle's chunks and registers it.
func (c *Registry) registerTree(ctx context.Context, builtin bool, stage func(dir string) error) (HarnessView, error) {
	r := c.harnessReg
	start := c.now()
	r.begin()
	bundlePath := ""
	defer func() { r.end(bundlePath) }()
	tmp, err := r.treeDir(start)
	if err != nil {
		return HarnessView{}, err
	}
	defer removeTree(tmp)
	tree := filepath.Join(tmp, "tree")
	if err := stage(tree); err != nil {
		return HarnessView{}, inTree(err, tree)
	}
	bundle, err := r.builder.Build(ctx, harness.BuildSpec{Dir: tree})
	if err != nil {
		return HarnessView{}, inTree(err, tree)
	}
	bundlePath = bundle.Path
	man, stats, err := r.chunks.PutFile(ctx, bundle.Path)
	if err != nil {
		return HarnessView{}, fmt.Errorf("store the bundle's chunks: %w", err)
	}
	v, err := c.putHarness(ctx, bundle, man, builtin)
	if err != nil {
		return HarnessView{}, err
	}
	c.log.Info("harness registered", "harness_id", v.Harness.ID, "name", v.Harness.Name, "version", v.Harness.Version,
		"digest", v.Harness.Digest, "builtin", builtin, "size", bundle.SizeBytes, "uploaded", stats.UploadedBytes, "took", c.now().Sub(start))
	return v, nil
}

// treeError is an error about a staged tree, its temporary path left out.
type treeError struct {
	err error
	msg string
}

func (e *treeError) Error() string { return e.msg }
func (e *treeError) Unwrap() error { return e.err }

// inTree names files of the staged tree by their path in the tree.
func inTree(err error, tree string) error {
	r := strings.NewReplacer("build harness bundle from "+tree+": ", "", "check tree "+tree+": ", "",
		tree+string(filepath.Separator), "", tree, "the tree")
	return &treeError{err: err, msg: r.Replace(err.Error())}
}

// putHarness registers a stored bundle; the same bundle again answers with
// the registered row.
func (c *Registry) putHarness(ctx context.Context, bundle harness.Bundle, man chunk.Manifest, builtin bool) (HarnessView, error) {
	d := bundle.Descriptor
	desc, err := d.Marshal()
	if err != nil {
		return HarnessView{}, err
	}
	raw, err := man.Encode()
	if err != nil {
		return HarnessView{}, err
	}
	h, err := c.st.PutHarness(ctx, domain.Harness{ID: c.newID(), Name: d.Name, Version: d.Version, Descriptor: desc,
		Manifest: raw, Digest: bundle.Digest, Builtin: builtin, CreatedAt: c.now()})
	if errors.Is(err, store.ErrConflict) {
		other, ferr := c.st.FindHarness(ctx, d.Name, d.Version)
		if ferr == nil {
			return HarnessView{}, fmt.Errorf("%w: %s@%s is already registered with another bundle (%s, this one is %s); "+
				"a registered version never changes: give this one another version in %s", store.ErrConflict,
				d.Name, d.Version, other.Digest, bundle.Digest, guestapi.HarnessDescriptorFile)
		}
	}
	if err != nil {
		return HarnessView{}, fmt.Errorf("register harness %s@%s: %w", d.Name, d.Version, err)
	}
	if h.Builtin != builtin {
		return HarnessView{}, fmt.Errorf("%w: %s@%s is registered with this bundle as a %s harness", store.ErrConflict, d.Name, d.Version, kindWord(h.Builtin))
	}
	return harnessView(h)
}

func kindWord(builtin bool) string {
	if builtin {
		return "built-in"
	}
	return "custom"
}

func harnessView(h domain.Harness) (HarnessView, error) {
	d, err := guestapi.ParseHarnessDescriptor(h.Descriptor)
	if err != nil {
		return HarnessView{}, fmt.Errorf("harness %s@%s: %w", h.Name, h.Version, err)
	}
	v := HarnessView{Harness: h, Descriptor: d}
	var m chunk.Manifest
	if json.Unmarshal(h.Manifest, &m) == nil {
		v.SizeBytes = m.Size
	}
	return v, nil
}

// Harnesses lists registered harnesses by name, then oldest first (not
// the deleted ones).
func (c *Registry) Harnesses(ctx context.Context) ([]HarnessView, error) {
	hs, err := c.st.ListHarnesses(ctx)
	if err != nil {
		return nil, fmt.Errorf("list harnesses: %w", err)
	}
	out := make([]HarnessView, 0, len(hs))
	for _, h := range hs {
		if !h.DeletedAt.IsZero() {
			continue
		}
		v, err := harnessView(h)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Harness returns name@version ("" version: the newest).
func (c *Registry) Harness(ctx context.Context, name, version string) (HarnessView, error) {
	h, err := c.st.FindHarness(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		what := name
		if version != "" {
			what += "@" + version
		}
		return HarnessView{}, fmt.Errorf("harness %s: %w", what, store.ErrNotFound)
	}
	if err != nil {
		return HarnessView{}, fmt.Errorf("find harness %s: %w", name, err)
	}
	return harnessView(h)
}

// DeleteHarness deletes name@version ("" version: the newest): no new
// profile or session can name it, while sessions made with it keep it
// (they name its bundle by id, and its chunks stay live); building or
// adding the same bundle again brings it back.
func (c *Registry) DeleteHarness(ctx context.Context, name, version string) (HarnessView, error) {
	v, err := c.Harness(ctx, name, version)
	if err != nil {
		return HarnessView{}, err
	}
	h, err := c.st.DeleteHarness(ctx, v.Harness.ID, c.now())
	if err != nil {
		return HarnessView{}, fmt.Errorf("delete harness %s@%s: %w", v.Harness.Name, v.Harness.Version, err)
	}
	c.log.Info("harness deleted", "harness_id", h.ID, "name", h.Name, "version", h.Version)
	return harnessView(h)
}

// MarkLive adds the chunks of every registered harness bundle to live:
// rows are never deleted (a deleted harness keeps its row), so GC must
// keep them all (a GC root).
func (c *Registry) MarkLive(ctx context.Context, live map[string]bool) error {
	hs, err := c.st.ListHarnesses(ctx)
	if err != nil {
		return fmt.Errorf("list harnesses: %w", err)
	}
	for _, h := range hs {
		var m chunk.Manifest
		if err := json.Unmarshal(h.Manifest, &m); err != nil {
			return fmt.Errorf("manifest of harness %s: %w", h.ID, err)
		}
		chunk.MarkLive(live, m)
	}
	return nil
}
