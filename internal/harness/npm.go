package harness

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// Error categories of fetching npm packages.
var (
	// ErrRegistry: the npm registry could not be reached or answered an error.
	ErrRegistry = errors.New("npm registry unavailable")
	// ErrNotFound: the registry has no such package or version.
	ErrNotFound = errors.New("npm package not found")
	// ErrIntegrity: a tarball does not match the integrity the registry gives.
	ErrIntegrity = errors.New("npm tarball integrity mismatch")
	// ErrUnsupportedPackage: the package is not laid out as this package
	// knows (no linux x86-64 program, a link or device in the tarball, ...).
	ErrUnsupportedPackage = errors.New("unsupported npm package")
)

const (
	maxManifestBytes = 8 << 20
	maxTarballBytes  = 1 << 30 // compressed
	maxExtractBytes  = 4 << 30 // uncompressed
)

var (
	npmNameRE    = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*$`)
	npmVersionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]+)?$`)
	npmTagRE     = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._-]{0,63}$`)
)

// npmManifest is what the registry says of one version of a package.
type npmManifest struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	Bin                  json.RawMessage   `json:"bin"`
	Engines              json.RawMessage   `json:"engines"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	Dist                 struct {
		Tarball   string `json:"tarball"`
		Integrity string `json:"integrity"`
	} `json:"dist"`
}

// binPath is the manifest's program for command name (bin is a map of
// names to paths, or one path named after the package).
func (m npmManifest) binPath(name string) string {
	var one string
	if json.Unmarshal(m.Bin, &one) == nil {
		return path.Clean(one)
	}
	var many map[string]string
	if json.Unmarshal(m.Bin, &many) == nil && many[name] != "" {
		return path.Clean(many[name])
	}
	return ""
}

// engine is the manifest's engines entry for name ("" when absent).
func (m npmManifest) engine(name string) string {
	var many map[string]string
	if json.Unmarshal(m.Engines, &many) == nil {
		return many[name]
	}
	return ""
}

// cacheKey names a package version in the cache: "openai+codex@0.171.0".
func cacheKey(name, version string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, "@"), "/", "+") + "@" + version
}

// manifest returns name's metadata at version, an exact version (read from
// the cache when fetched before) or a dist-tag ("" means "latest").
func (b *Builder) manifest(ctx context.Context, name, version string) (npmManifest, error) {
	if version == "" {
		version = "latest"
	}
	exact := npmVersionRE.MatchString(version)
	switch {
	case !npmNameRE.MatchString(name):
		return npmManifest{}, fmt.Errorf("%w: bad package name %q", ErrNotFound, name)
	case !exact && !npmTagRE.MatchString(version):
		return npmManifest{}, fmt.Errorf("%w: %q is neither an exact version nor a dist-tag (ranges are not resolved)", ErrNotFound, version)
	}
	cached := filepath.Join(b.cfg.CacheDir, "npm", cacheKey(name, version)+".json")
	var m npmManifest
	if data, err := os.ReadFile(cached); exact && err == nil && json.Unmarshal(data, &m) == nil &&
		m.Name == name && m.Version == version {
		return m, nil
	}
	u := b.cfg.Registry + "/" + strings.Replace(name, "/", "%2f", 1) + "/" + url.PathEscape(version)
	data, err := b.getBytes(ctx, u, maxManifestBytes)
	if err != nil {
		return npmManifest{}, fmt.Errorf("%s@%s: %w", name, version, err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return npmManifest{}, fmt.Errorf("%w: %s@%s: metadata: %v", ErrRegistry, name, version, err)
	}
	switch {
	case m.Name != name || !npmVersionRE.MatchString(m.Version) || (exact && m.Version != version):
		return npmManifest{}, fmt.Errorf("%w: asked for %s@%s, the registry answered %s@%s", ErrRegistry, name, version, m.Name, m.Version)
	case m.Dist.Tarball == "" || !strings.HasPrefix(m.Dist.Integrity, "sha512-"):
		return npmManifest{}, fmt.Errorf("%w: %s@%s has no tarball with a sha512 integrity", ErrUnsupportedPackage, name, m.Version)
	}
	cached = filepath.Join(b.cfg.CacheDir, "npm", cacheKey(name, m.Version)+".json")
	if err := writeFileAtomic(cached, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		return npmManifest{}, fmt.Errorf("cache metadata of %s@%s: %w", name, m.Version, err)
	}
	return m, nil
}

// tarball returns the path of m's tarball in the cache, downloading it
// when absent. Cached or not, its SHA-512 must equal the registry's
// integrity.
func (b *Builder) tarball(ctx context.Context, m npmManifest) (string, error) {
	want, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.Fields(m.Dist.Integrity)[0], "sha512-"))
	if err != nil || len(want) != sha512.Size {
		return "", fmt.Errorf("%w: %s@%s: malformed integrity %q", ErrUnsupportedPackage, m.Name, m.Version, m.Dist.Integrity)
	}
	p := filepath.Join(b.cfg.CacheDir, "npm", cacheKey(m.Name, m.Version)+".tgz")
	if got, err := fileSHA512(p); err == nil && string(got) == string(want) {
		return p, nil
	}
	tu, err := url.Parse(m.Dist.Tarball)
	if err != nil || (tu.Scheme != "https" && tu.Scheme != "http") {
		return "", fmt.Errorf("%w: %s@%s: tarball URL %q", ErrUnsupportedPackage, m.Name, m.Version, m.Dist.Tarball)
	}
	b.log.Info("downloading npm package", "package", m.Name, "version", m.Version)
	err = writeFileAtomic(p, func(w io.Writer) error {
		h := sha512.New()
		if err := b.getTo(ctx, m.Dist.Tarball, maxTarballBytes, io.MultiWriter(w, h)); err != nil {
			return err
		}
		if got := h.Sum(nil); string(got) != string(want) {
			return fmt.Errorf("%w: %s@%s: sha512 %s, the registry says %s", ErrIntegrity, m.Name, m.Version,
				base64.StdEncoding.EncodeToString(got), m.Dist.Integrity)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("fetch %s@%s: %w", m.Name, m.Version, err)
	}
	return p, nil
}

// open GETs u and checks the answer is 200 OK.
func (b *Builder) open(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRegistry, err)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRegistry, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return nil, fmt.Errorf("%w: GET %s: %s", ErrNotFound, u, resp.Status)
		}
		return nil, fmt.Errorf("%w: GET %s: %s", ErrRegistry, u, resp.Status)
	}
	return resp, nil
}

// getBytes returns the body of u, at most limit bytes.
func (b *Builder) getBytes(ctx context.Context, u string, limit int64) ([]byte, error) {
	resp, err := b.open(ctx, u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && int64(len(data)) > limit {
		err = fmt.Errorf("more than %d bytes", limit)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: GET %s: %v", ErrRegistry, u, err)
	}
	return data, nil
}

// getTo streams the body of u, at most limit bytes, into w.
func (b *Builder) getTo(ctx context.Context, u string, limit int64, w io.Writer) error {
	resp, err := b.open(ctx, u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, io.LimitReader(resp.Body, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("more than %d bytes", limit)
	}
	if err != nil {
		return fmt.Errorf("%w: GET %s: %v", ErrRegistry, u, err)
	}
	return nil
}

func fileSHA512(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha512.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// writeFileAtomic creates p (and its directory) from what fill writes, via
// a temporary file renamed into place, so concurrent builds sharing a cache
// never see a partial file.
func writeFileAtomic(p string, fill func(w io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// extractTarball unpacks the npm tarball tgz under dest. Each entry's path,
// its first component (npm's "package/") removed, goes through place,
// which says where under dest it lands, or false to leave it out. Only
// files, directories and symlinks are accepted; files are 0755 when any
// execute bit is set, else 0644. Writes go through os.Root: no entry and no
// symlink can place anything outside dest.
func extractTarball(tgz, dest string, place func(rel string) (string, bool)) error {
	f, err := os.Open(tgz)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnsupportedPackage, tgz, err)
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dest)
	if err != nil {
		return err
	}
	defer root.Close()
	x := &extractor{root: root, place: place}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrUnsupportedPackage, tgz, err)
		}
		if err := x.entry(hdr, tr); err != nil {
			return fmt.Errorf("extract %s: %s: %w", filepath.Base(tgz), hdr.Name, err)
		}
	}
}

type extractor struct {
	root    *os.Root
	place   func(rel string) (string, bool)
	written int64
}

func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	if slices.Contains(strings.Split(hdr.Name, "/"), "..") {
		return fmt.Errorf("%w: the path leaves the package", ErrUnsupportedPackage)
	}
	_, rel, _ := strings.Cut(strings.TrimPrefix(path.Clean("/"+hdr.Name), "/"), "/")
	if rel == "" {
		return nil
	}
	dst, ok := x.place(rel)
	if !ok {
		return nil
	}
	if err := guestapi.CheckHarnessPath(dst); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupportedPackage, err)
	}
	dst = filepath.FromSlash(dst)
	if dir := filepath.Dir(dst); dir != "." {
		if err := x.root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.root.MkdirAll(dst, 0o755)
	case tar.TypeSymlink:
		_ = x.root.Remove(dst)
		return x.root.Symlink(hdr.Linkname, dst)
	case tar.TypeReg:
		mode := os.FileMode(0o644)
		if hdr.Mode&0o111 != 0 {
			mode = 0o755
		}
		if x.written += hdr.Size; x.written > maxExtractBytes {
			return fmt.Errorf("%w: more than %d bytes unpacked", ErrUnsupportedPackage, int64(maxExtractBytes))
		}
		_ = x.root.Remove(dst)
		out, err := x.root.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, r)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = x.root.Chmod(dst, mode) // whatever the umask
		}
		return err
	}
	return fmt.Errorf("%w: entry type %q (only files, directories and symlinks)", ErrUnsupportedPackage, hdr.Typeflag)
}
