package ghapp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultBaseURL is GitHub's REST API; GitHub Enterprise Server's is
// https://HOST/api/v3.
const DefaultBaseURL = "https://api.github.com"

// jwtLifetime is how long an app JWT is valid after its (backdated) issue
// time: GitHub takes at most 10 minutes into the future.
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 10 * time.Minute
)

// App is one installation of a GitHub App.
type App struct {
	// ID is the app's client ID (Iv1..., Iv23...) or numeric app ID: the
	// JWT's issuer.
	ID             string
	InstallationID int64
	BaseURL        string // the REST API; "" is DefaultBaseURL
	Key            *rsa.PrivateKey
}

// NewApp checks an app's settings and parses its private key (the PEM
// file GitHub hands out).
func NewApp(id string, installationID int64, baseURL string, privateKeyPEM []byte) (App, error) {
	if err := CheckAppID(id); err != nil {
		return App{}, err
	}
	if installationID <= 0 {
		return App{}, fmt.Errorf("installation id %d: want the positive id of the app's installation", installationID)
	}
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	if u, err := url.Parse(baseURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return App{}, fmt.Errorf("base url %q: want the REST API's URL, such as %s", baseURL, DefaultBaseURL)
	}
	key, err := ParsePrivateKey(privateKeyPEM)
	if err != nil {
		return App{}, err
	}
	return App{ID: id, InstallationID: installationID, BaseURL: strings.TrimRight(baseURL, "/"), Key: key}, nil
}

// CheckAppID accepts a numeric app ID or a client ID.
func CheckAppID(id string) error {
	if id == "" || len(id) > 64 || strings.ContainsFunc(id, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) {
		return fmt.Errorf("app id %q: want the GitHub App's client ID (Iv1...) or its numeric app ID", id)
	}
	return nil
}

// ParsePrivateKey reads an RSA private key from PEM: PKCS #1 ("RSA PRIVATE
// KEY", what GitHub downloads) or PKCS #8 ("PRIVATE KEY").
func ParsePrivateKey(b []byte) (*rsa.PrivateKey, error) {
	block, rest := pem.Decode(b)
	if block == nil {
		return nil, errors.New("private key: not PEM (want the .pem file GitHub made for the app)")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return nil, errors.New("private key: more than one PEM block")
	}
	var key *rsa.PrivateKey
	switch block.Type {
	case "RSA PRIVATE KEY":
		k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		key = k
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key: a %T, want RSA (GitHub signs app JWTs with RS256)", k)
		}
		key = rk
	default:
		return nil, fmt.Errorf("private key: a PEM %q block, want RSA PRIVATE KEY", block.Type)
	}
	if key.N.BitLen() < 2048 {
		return nil, fmt.Errorf("private key: %d bits, want at least 2048", key.N.BitLen())
	}
	return key, nil
}

// fingerprint names the app's key (its public half) in cache keys.
func (a App) fingerprint() string {
	sum := sha256.Sum256(a.Key.N.Bytes())
	return base64.RawURLEncoding.EncodeToString(sum[:8])
}

// JWT is the app's RS256 JSON Web Token at now: issued a minute in the past
// (for clock drift) and expiring 10 minutes after that, so at most 9
// minutes ahead.
func (a App) JWT(now time.Time) (string, error) {
	iat := now.Add(-jwtBackdate).Unix()
	claims := map[string]any{"iat": iat, "exp": iat + int64(jwtLifetime/time.Second), "iss": a.ID}
	if n, err := strconv.ParseInt(a.ID, 10, 64); err == nil {
		claims["iss"] = n // a numeric app ID goes as a number, as GitHub's examples send it
	}
	header, err := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT"})
	if err != nil {
		return "", err
	}
	body, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString(header) + "." + enc.EncodeToString(body)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.Key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("sign the app JWT: %w", err)
	}
	return signed + "." + enc.EncodeToString(sig), nil
}

// RepoOf splits a GitHub repository URL, https://HOST/OWNER/NAME with an
// optional .git, into its owner and name (what a token is scoped to).
func RepoOf(rawURL string) (owner, name string, err error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("repository url %q: %w", rawURL, err)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" || parts[1] == ".git" {
		return "", "", fmt.Errorf("repository url %q: want https://HOST/OWNER/NAME, which a GitHub App token can be scoped to", rawURL)
	}
	return parts[0], strings.TrimSuffix(parts[1], ".git"), nil
}
