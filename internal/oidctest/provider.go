package oidctest

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Client is a registered relying party.
type Client struct {
	Secret       string   // "" for a public client (PKCE alone)
	RedirectURIs []string // exact matches
}

// Identity is the person the provider signs in.
type Identity struct {
	Subject  string
	Email    string
	Verified bool
	Name     string
	Groups   []string // the "groups" claim when non-nil
}

// Provider is a running OIDC provider.
type Provider struct {
	URL string // the issuer

	srv *httptest.Server
	key *rsa.PrivateKey
	kid string

	mu         sync.Mutex
	clients    map[string]Client
	current    *Identity // who is signed in at the provider; nil: nobody
	codes      map[string]*grant
	devices    map[string]*device // by device code
	wrongNonce bool
	now        func() time.Time
}

type grant struct {
	client, redirect, challenge, nonce string
	who                                Identity
	expires                            time.Time
	used                               bool
}

type device struct {
	client, userCode string
	who              *Identity // set when approved
	expires          time.Time
	done             bool
}

// New starts a provider with the given clients; it stops with the test.
func New(t testing.TB, clients map[string]Client) *Provider {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	p := &Provider{key: key, kid: "k1", clients: clients, codes: map[string]*grant{}, devices: map[string]*device{}, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", p.discovery)
	mux.HandleFunc("GET /jwks", p.jwks)
	mux.HandleFunc("GET /authorize", p.authorize)
	mux.HandleFunc("POST /token", p.token)
	mux.HandleFunc("POST /device_authorization", p.deviceAuthorization)
	p.srv = httptest.NewServer(mux)
	p.URL = p.srv.URL
	t.Cleanup(p.srv.Close)
	return p
}

// SignIn makes who the person signed in at the provider (nil: nobody).
func (p *Provider) SignIn(who *Identity) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current = who
}

// WrongNonce makes ID tokens from the code flow carry another nonce.
func (p *Provider) WrongNonce(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.wrongNonce = on
}

// ExpireCodes makes every outstanding authorization code expired.
func (p *Provider) ExpireCodes() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, g := range p.codes {
		g.expires = p.now().Add(-time.Second)
	}
}

// Approve approves the device authorization with userCode as who (the
// person at the verification page); false if no such code is pending.
func (p *Provider) Approve(userCode string, who Identity) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.devices {
		if d.userCode == userCode && d.who == nil && p.now().Before(d.expires) {
			d.who = &who
			return true
		}
	}
	return false
}

// IDToken signs an ID token for who, for tests that present one directly.
func (p *Provider) IDToken(client string, who Identity, nonce string, issued time.Time) string {
	return p.sign(client, who, nonce, issued)
}

func (p *Provider) discovery(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer":                                p.URL,
		"authorization_endpoint":                p.URL + "/authorize",
		"token_endpoint":                        p.URL + "/token",
		"jwks_uri":                              p.URL + "/jwks",
		"device_authorization_endpoint":         p.URL + "/device_authorization",
		"response_types_supported":              []string{"code"},
		"subject_types_supported":               []string{"public"},
		"id_token_signing_alg_values_supported": []string{"RS256"},
		"code_challenge_methods_supported":      []string{"S256"},
		"grant_types_supported":                 []string{"authorization_code", "urn:ietf:params:oauth:grant-type:device_code"},
		"scopes_supported":                      []string{"openid", "email", "profile"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "none"},
	})
}

func (p *Provider) jwks(w http.ResponseWriter, _ *http.Request) {
	pub := p.key.PublicKey
	writeJSON(w, http.StatusOK, map[string]any{"keys": []map[string]string{{
		"kty": "RSA", "use": "sig", "alg": "RS256", "kid": p.kid,
		"n": b64(pub.N.Bytes()), "e": b64(big.NewInt(int64(pub.E)).Bytes()),
	}}})
}

// authorize answers the browser at once, as a provider where the person
// is already signed in does: a code to the registered redirect URI.
func (p *Provider) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[q.Get("client_id")]
	redirect := q.Get("redirect_uri")
	if !ok || !slices.Contains(c.RedirectURIs, redirect) {
		http.Error(w, "unknown client or redirect_uri", http.StatusBadRequest)
		return
	}
	back := func(params url.Values) {
		params.Set("state", q.Get("state"))
		http.Redirect(w, r, redirect+"?"+params.Encode(), http.StatusFound)
	}
	switch {
	case q.Get("response_type") != "code" || !strings.Contains(" "+q.Get("scope")+" ", " openid "):
		back(url.Values{"error": {"unsupported_response_type"}})
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		back(url.Values{"error": {"invalid_request"}, "error_description": {"PKCE with S256 is required"}})
	case p.current == nil:
		back(url.Values{"error": {"login_required"}})
	default:
		code := random()
		p.codes[code] = &grant{client: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge"),
			nonce: q.Get("nonce"), who: *p.current, expires: p.now().Add(time.Minute)}
		back(url.Values{"code": {code}})
	}
}

// client authenticates the token request's client (basic or post).
func (p *Provider) client(r *http.Request) (string, bool) {
	id, secret, basic := r.BasicAuth()
	if !basic {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	} else {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	}
	c, ok := p.clients[id]
	return id, ok && c.Secret == secret
}

func (p *Provider) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id, ok := p.client(r)
	if !ok {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	}
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		p.codeGrant(w, r, id)
	case "urn:ietf:params:oauth:grant-type:device_code":
		p.deviceGrant(w, r, id)
	default:
		oauthError(w, "unsupported_grant_type")
	}
}

func (p *Provider) codeGrant(w http.ResponseWriter, r *http.Request, client string) {
	g, ok := p.codes[r.PostForm.Get("code")]
	if !ok || g.used || !p.now().Before(g.expires) || g.client != client || g.redirect != r.PostForm.Get("redirect_uri") {
		oauthError(w, "invalid_grant")
		return
	}
	sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
	if b64(sum[:]) != g.challenge {
		oauthError(w, "invalid_grant")
		return
	}
	g.used = true
	nonce := g.nonce
	if p.wrongNonce {
		nonce = "not-" + nonce
	}
	p.tokens(w, client, g.who, nonce)
}

func (p *Provider) deviceGrant(w http.ResponseWriter, r *http.Request, client string) {
	d, ok := p.devices[r.PostForm.Get("device_code")]
	switch {
	case !ok || d.client != client || d.done:
		oauthError(w, "invalid_grant")
	case !p.now().Before(d.expires):
		oauthError(w, "expired_token")
	case d.who == nil:
		oauthError(w, "authorization_pending")
	default:
		d.done = true
		p.tokens(w, client, *d.who, "")
	}
}

func (p *Provider) tokens(w http.ResponseWriter, client string, who Identity, nonce string) {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"access_token": random(), "token_type": "Bearer", "expires_in": 3600,
		"id_token": p.sign(client, who, nonce, p.now())})
}

func (p *Provider) deviceAuthorization(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthError(w, "invalid_request")
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	id := r.PostForm.Get("client_id")
	if _, ok := p.clients[id]; !ok {
		oauthError(w, "invalid_client")
		return
	}
	dc, uc := random(), userCode()
	p.devices[dc] = &device{client: id, userCode: uc, expires: p.now().Add(5 * time.Minute)}
	writeJSON(w, http.StatusOK, map[string]any{"device_code": dc, "user_code": uc, "verification_uri": p.URL + "/device",
		"verification_uri_complete": p.URL + "/device?user_code=" + uc, "expires_in": 300, "interval": 1})
}

// sign makes an RS256 JWT of the ID token's claims.
func (p *Provider) sign(client string, who Identity, nonce string, issued time.Time) string {
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": p.kid, "typ": "JWT"})
	claims := map[string]any{"iss": p.URL, "sub": who.Subject, "aud": client, "iat": issued.Unix(), "exp": issued.Add(time.Hour).Unix(),
		"email": who.Email, "email_verified": who.Verified, "name": who.Name}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	if who.Groups != nil {
		claims["groups"] = who.Groups
	}
	body, _ := json.Marshal(claims)
	signing := b64(header) + "." + b64(body)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, p.key, crypto.SHA256, sum[:])
	if err != nil {
		panic(fmt.Sprintf("oidctest: sign: %v", err))
	}
	return signing + "." + b64(sig)
}

func oauthError(w http.ResponseWriter, code string) {
	writeJSON(w, http.StatusBadRequest, map[string]string{"error": code})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func random() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return b64(b)
}

// userCode is eight letters a person can type, as RFC 8628 §6.1 advises.
func userCode() string {
	const letters = "BCDFGHJKLMNPQRSTVWXZ"
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	out := make([]byte, 0, 9)
	for i, c := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, letters[int(c)%len(letters)])
	}
	return string(out)
}
