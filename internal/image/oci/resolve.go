package oci

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/engrams/engrams/internal/netpolicy"
)

// Config tunes a Puller.
type Config struct {
	// UserAgent is sent to registries; empty means "engrams".
	UserAgent string
	// Limits bound every pull (zero fields: DefaultLimits); a Request may override them.
	Limits Limits
	// SkipOwnership leaves every file owned by the calling user and drops
	// security.* xattrs: for development runs as non-root. A guest root filesystem
	// needs the image's owners, so production runs as root with this false.
	SkipOwnership bool
}

// Dialer connects to registries and their token services (a *netpolicy.Guard
// does: it refuses private and loopback addresses unless the operator allowed them).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Deps are the Puller's collaborators.
type Deps struct {
	// Logger receives debug lines per layer and one line per pull; nil discards.
	Logger *slog.Logger
	// Dialer makes every connection a pull needs; nil: a netpolicy.Guard
	// without allowances (no registry on a private or loopback address).
	// No proxy is used: it would reach what the dialer refuses.
	Dialer Dialer
}

// Puller resolves and pulls images. It holds no state between calls and is safe for
// concurrent use.
type Puller struct {
	cfg       Config
	log       *slog.Logger
	transport http.RoundTripper
}

// New returns a Puller.
func New(cfg Config, deps Deps) *Puller {
	if cfg.UserAgent == "" {
		cfg.UserAgent = "engrams"
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Dialer == nil {
		deps.Dialer = netpolicy.NewGuard(netpolicy.GuardConfig{})
	}
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = deps.Dialer.DialContext
	return &Puller{cfg: cfg, log: deps.Logger, transport: t}
}

// Credentials authenticate to one registry. The zero value is anonymous. Username and
// Password answer a Basic challenge, and are exchanged at the token service for a
// Bearer challenge; Token is a bearer token sent to the registry as is (a pre-issued
// registry token). Nothing is read from ~/.docker or credential helpers.
type Credentials struct {
	Username string
	Password string
	Token    string
}

// String never shows the secrets.
func (c Credentials) String() string {
	switch {
	case c.Token != "":
		return "token(redacted)"
	case c.Username != "":
		return fmt.Sprintf("basic(%s:redacted)", c.Username)
	}
	return "anonymous"
}

// LogValue keeps the secrets out of logs.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

func (c Credentials) authenticator() (authn.Authenticator, error) {
	switch {
	case c.Token != "" && (c.Username != "" || c.Password != ""):
		return nil, errors.New("credentials: give a token or a username and password, not both")
	case c.Token != "":
		return authn.FromConfig(authn.AuthConfig{RegistryToken: c.Token}), nil
	case c.Username != "" || c.Password != "":
		if c.Username == "" || c.Password == "" {
			return nil, errors.New("credentials: a username needs a password")
		}
		return authn.FromConfig(authn.AuthConfig{Username: c.Username, Password: c.Password}), nil
	}
	return authn.Anonymous, nil
}

// Platform is the only platform pulled.
const Platform = "linux/amd64"

// ImageConfig is what the image's config says about running it.
type ImageConfig struct {
	Env        []string
	WorkingDir string
	Entrypoint []string
	Cmd        []string
	User       string
}

// Layer is one layer as the manifest lists it.
type Layer struct {
	Digest    string // of the compressed blob, "sha256:…"
	DiffID    string // of the uncompressed tar, from the config
	Size      int64  // compressed bytes
	MediaType string
}

// Resolved is an image reference resolved to its linux/amd64 manifest.
type Resolved struct {
	Repository  string // e.g. "registry.example.com/team/app"
	Digest      string // the linux/amd64 manifest digest, "sha256:…"
	IndexDigest string // the index it was picked from; empty if the reference named a manifest
	Config      ImageConfig
	Layers      []Layer
}

// Pinned is the reference by digest: pull it to get exactly this image even if the
// tag moved since.
func (r Resolved) Pinned() string { return r.Repository + "@" + r.Digest }

// CompressedBytes is the sum of the layer blob sizes: what a pull downloads.
func (r Resolved) CompressedBytes() int64 {
	var n int64
	for _, l := range r.Layers {
		n += l.Size
	}
	return n
}

// Resolve fetches the manifest (picking linux/amd64 from an index) and the config,
// without downloading layers.
func (p *Puller) Resolve(ctx context.Context, ref string, auth Credentials) (Resolved, error) {
	res, _, err := p.resolve(ctx, ref, auth)
	return res, err
}

func (p *Puller) resolve(ctx context.Context, ref string, auth Credentials) (Resolved, v1.Image, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return Resolved{}, nil, fmt.Errorf("resolve %q: %w: %v", ref, ErrInvalidReference, err)
	}
	a, err := auth.authenticator()
	if err != nil {
		return Resolved{}, nil, fmt.Errorf("resolve %s: %w", ref, err)
	}
	opts := []remote.Option{
		remote.WithContext(ctx), remote.WithAuth(a),
		remote.WithTransport(p.transport), remote.WithUserAgent(p.cfg.UserAgent),
	}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		p.logDetail(ref, err)
		return Resolved{}, nil, fmt.Errorf("resolve %s: %w", ref, classify(err))
	}
	res := Resolved{Repository: r.Context().Name(), Digest: desc.Digest.String()}
	img, err := p.pickImage(desc, &res)
	if err != nil {
		p.logDetail(ref, err)
		return Resolved{}, nil, fmt.Errorf("resolve %s: %w", ref, err)
	}
	if err := describe(img, &res, p.cfg.Limits.complete()); err != nil {
		p.logDetail(ref, err)
		return Resolved{}, nil, fmt.Errorf("resolve %s: %w", ref, err)
	}
	return res, img, nil
}

// pickImage returns the linux/amd64 image desc names, recording the digests in res.
func (p *Puller) pickImage(desc *remote.Descriptor, res *Resolved) (v1.Image, error) {
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, classify(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("read index: %w", classify(err))
		}
		d, err := pickPlatform(im)
		if err != nil {
			return nil, err
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("fetch manifest %s: %w", d.Digest, classify(err))
		}
		res.IndexDigest, res.Digest = desc.Digest.String(), d.Digest.String()
		return img, nil
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, classify(err)
		}
		return img, nil
	}
	return nil, fmt.Errorf("%w: %s is not an image or an index", ErrNoPlatform, desc.MediaType)
}

// pickPlatform picks the first linux/amd64 (baseline variant) entry of an index.
func pickPlatform(im *v1.IndexManifest) (v1.Descriptor, error) {
	var seen []string
	for _, d := range im.Manifests {
		pl := d.Platform
		if pl == nil {
			continue
		}
		if pl.OS == "linux" && pl.Architecture == "amd64" && (pl.Variant == "" || pl.Variant == "v1") &&
			!d.MediaType.IsIndex() {
			return d, nil
		}
		if s := pl.String(); pl.OS != "unknown" && !slices.Contains(seen, s) {
			seen = append(seen, s) // unknown/unknown are attestations, not platforms
		}
	}
	if len(seen) == 0 {
		return v1.Descriptor{}, fmt.Errorf("%w: the index declares no platforms", ErrNoPlatform)
	}
	return v1.Descriptor{}, fmt.Errorf("%w: the index has %s", ErrNoPlatform, strings.Join(seen, ", "))
}

// describe fills res from the image's config and manifest, checking the platform of
// a single-manifest image and the size of its config (read into memory) and layers.
func describe(img v1.Image, res *Resolved, lim Limits) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("read manifest: %w", classify(err))
	}
	if err := checkManifest(m, lim); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("fetch config: %w", classify(err))
	}
	if (cf.OS != "" && cf.OS != "linux") || (cf.Architecture != "" && cf.Architecture != "amd64") {
		return fmt.Errorf("%w: the image is %s/%s", ErrNoPlatform, cf.OS, cf.Architecture)
	}
	if len(m.Layers) != len(cf.RootFS.DiffIDs) {
		return fmt.Errorf("%w: manifest lists %d layers, config %d diff_ids",
			ErrCorruptLayer, len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	res.Config = ImageConfig{
		Env: cf.Config.Env, WorkingDir: cf.Config.WorkingDir,
		Entrypoint: cf.Config.Entrypoint, Cmd: cf.Config.Cmd, User: cf.Config.User,
	}
	for i, l := range m.Layers {
		if !l.MediaType.IsLayer() {
			return fmt.Errorf("%w: layer %d has media type %s", ErrCorruptLayer, i+1, l.MediaType)
		}
		res.Layers = append(res.Layers, Layer{
			Digest: l.Digest.String(), DiffID: cf.RootFS.DiffIDs[i].String(),
			Size: l.Size, MediaType: string(l.MediaType),
		})
	}
	return nil
}

// checkManifest refuses, before the config is fetched, a manifest past lim: a
// config larger than ConfigBytes or more layers than Layers. (The layers' sizes
// are checked by Pull, against the request's StreamBytes.)
func checkManifest(m *v1.Manifest, lim Limits) error {
	if m.Config.Size > lim.ConfigBytes {
		return &LimitError{Limit: "ConfigBytes", Max: lim.ConfigBytes,
			msg: fmt.Sprintf("the config is %d bytes, more than %d", m.Config.Size, lim.ConfigBytes)}
	}
	if len(m.Layers) > lim.Layers {
		return &LimitError{Limit: "Layers", Max: int64(lim.Layers),
			msg: fmt.Sprintf("%d layers, more than %d", len(m.Layers), lim.Layers)}
	}
	return nil
}

// ParseReference checks that ref is an image reference and returns its registry host
// (e.g. "registry.example.com", "127.0.0.1:5000", "index.docker.io").
func ParseReference(ref string) (registry string, err error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("parse %q: %w: %v", ref, ErrInvalidReference, err)
	}
	return r.Context().RegistryStr(), nil
}
