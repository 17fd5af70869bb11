package imagetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// AuthMode is how a Registry authenticates requests.
type AuthMode int

const (
	// NoAuth serves everyone.
	NoAuth AuthMode = iota
	// BasicAuth answers 401 with a Basic challenge unless the request carries the
	// username and password.
	BasicAuth
	// BearerAuth runs the token flow: the registry answers 401 with a Bearer challenge
	// whose realm is /token on the same listener; /token exchanges the username and
	// password (Basic) for a token the registry then accepts.
	BearerAuth
)

// RegistryOptions configure StartRegistry.
type RegistryOptions struct {
	Auth     AuthMode
	Username string // required unless Auth is NoAuth
	Password string // required unless Auth is NoAuth
}

// Registry is go-containerregistry's in-process registry on 127.0.0.1, with its blobs
// in memory where tests can corrupt them.
type Registry struct {
	host  string
	opts  RegistryOptions
	token string
	blobs *memBlobs
}

// StartRegistry serves a fresh, empty registry on 127.0.0.1 (an ephemeral port), and
// stops it when the test ends.
func StartRegistry(t testing.TB, opts RegistryOptions) *Registry {
	t.Helper()
	if opts.Auth != NoAuth && (opts.Username == "" || opts.Password == "") {
		t.Fatalf("imagetest: registry auth mode %d needs a username and a password", opts.Auth)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("imagetest: listen for the registry: %v", err)
	}
	r := &Registry{host: ln.Addr().String(), opts: opts, blobs: &memBlobs{m: map[string][]byte{}}}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithBlobHandler(r.blobs))
	switch opts.Auth {
	case BasicAuth:
		h = requireBasic(h, opts.Username, opts.Password)
	case BearerAuth:
		r.token = randomToken(t)
		h = requireBearer(h, r.host, opts.Username, opts.Password, r.token)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return r
}

// Host is "127.0.0.1:PORT".
func (r *Registry) Host() string { return r.host }

// Ref is the reference "127.0.0.1:PORT/repo:tag".
func (r *Registry) Ref(repo, tag string) string { return r.host + "/" + repo + ":" + tag }

// Token is the bearer token /token hands out (BearerAuth), usable as a pre-issued
// registry token; empty otherwise.
func (r *Registry) Token() string { return r.token }

// Push writes img as repo:tag, authenticating as the registry requires, and returns
// the manifest digest ("sha256:…").
func (r *Registry) Push(t testing.TB, repo, tag string, img v1.Image) string {
	t.Helper()
	ref, err := name.ParseReference(r.Ref(repo, tag))
	if err != nil {
		t.Fatalf("imagetest: parse %s: %v", r.Ref(repo, tag), err)
	}
	auth := authn.Anonymous
	if r.opts.Auth != NoAuth {
		auth = authn.FromConfig(authn.AuthConfig{Username: r.opts.Username, Password: r.opts.Password})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := remote.Write(ref, img, remote.WithAuth(auth), remote.WithContext(ctx)); err != nil {
		t.Fatalf("imagetest: push %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("imagetest: digest of %s: %v", ref, err)
	}
	return d.String()
}

// CorruptBlob flips bytes in the middle of the stored blob digest ("sha256:…", e.g.
// from LayerDigests), keeping its size: a pull reads the whole blob and finds that its
// digest does not match.
func (r *Registry) CorruptBlob(t testing.TB, digest string) {
	t.Helper()
	r.blobs.mu.Lock()
	defer r.blobs.mu.Unlock()
	b, ok := r.blobs.m[digest]
	if !ok || len(b) == 0 {
		t.Fatalf("imagetest: corrupt blob %s: not stored (or empty)", digest)
	}
	c := bytes.Clone(b)
	for i := len(c) / 2; i < len(c)/2+16 && i < len(c); i++ {
		c[i] ^= 0xff
	}
	r.blobs.m[digest] = c
}

// ReplaceBlob makes the registry serve body for digest (any size): a truncated or
// foreign blob under a manifest's digest.
func (r *Registry) ReplaceBlob(t testing.TB, digest string, body []byte) {
	t.Helper()
	r.blobs.mu.Lock()
	defer r.blobs.mu.Unlock()
	if _, ok := r.blobs.m[digest]; !ok {
		t.Fatalf("imagetest: replace blob %s: not stored", digest)
	}
	r.blobs.m[digest] = bytes.Clone(body)
}

// memBlobs is an in-memory registry.BlobHandler keyed by digest (all repositories
// share it), whose bytes tests may replace.
type memBlobs struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (b *memBlobs) Stat(_ context.Context, _ string, h v1.Hash) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	blob, ok := b.m[h.String()]
	if !ok {
		return 0, registry.ErrNotFound
	}
	return int64(len(blob)), nil
}

func (b *memBlobs) Get(_ context.Context, _ string, h v1.Hash) (io.ReadCloser, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	blob, ok := b.m[h.String()]
	if !ok {
		return nil, registry.ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(blob)), nil
}

// Put stores the blob; the registry verifies size and digest while it is read, and
// that error comes back from ReadAll.
func (b *memBlobs) Put(_ context.Context, _ string, h v1.Hash, rc io.ReadCloser) error {
	defer rc.Close()
	blob, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m[h.String()] = blob
	return nil
}

func (b *memBlobs) Delete(_ context.Context, _ string, h v1.Hash) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.m[h.String()]; !ok {
		return registry.ErrNotFound
	}
	delete(b.m, h.String())
	return nil
}

const unauthorizedBody = `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`

func unauthorized(w http.ResponseWriter, challenge string) {
	w.Header().Set("WWW-Authenticate", challenge)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = io.WriteString(w, unauthorizedBody)
}

// validBasic reports whether r carries user:pass as Basic credentials.
func validBasic(r *http.Request, user, pass string) bool {
	u, p, ok := r.BasicAuth()
	return ok && subtle.ConstantTimeCompare([]byte(u), []byte(user)) == 1 &&
		subtle.ConstantTimeCompare([]byte(p), []byte(pass)) == 1
}

// requireBasic answers 401 with a Basic challenge unless the request carries user:pass.
func requireBasic(h http.Handler, user, pass string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !validBasic(r, user, pass) {
			unauthorized(w, `Basic realm="engrams-imagetest"`)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// requireBearer serves the token endpoint at /token and answers every other request
// without the token with a Bearer challenge. Realm and service name the registry's own
// host:port: go-containerregistry refuses a token realm at another private address.
func requireBearer(h http.Handler, host, user, pass, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			if !validBasic(r, user, pass) {
				unauthorized(w, `Basic realm="engrams-imagetest-token"`)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{
				"token": token, "access_token": token, "expires_in": 3600,
			})
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1 {
			h.ServeHTTP(w, r)
			return
		}
		ch := fmt.Sprintf(`Bearer realm="http://%s/token",service="%s"`, host, host)
		if repo := repoOf(r.URL.Path); repo != "" {
			actions := "pull"
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				actions = "pull,push"
			}
			ch += fmt.Sprintf(`,scope="repository:%s:%s"`, repo, actions)
		}
		unauthorized(w, ch)
	})
}

// repoOf is the repository a /v2/<repo>/{manifests,blobs,tags}/… path names.
func repoOf(p string) string {
	rest, ok := strings.CutPrefix(p, "/v2/")
	if !ok {
		return ""
	}
	for _, sep := range []string{"/manifests/", "/blobs/", "/tags/"} {
		if repo, _, ok := strings.Cut(rest, sep); ok {
			return repo
		}
	}
	return ""
}

func randomToken(t testing.TB) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("imagetest: random token: %v", err)
	}
	return "imagetest-" + hex.EncodeToString(b)
}
