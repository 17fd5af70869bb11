package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/secrets"
)

// The deployment's CA: one ECDSA key and self-signed certificate per
// deployment, sealed in the secrets table like the gateway's key, so every
// replica signs with it. Guests of sessions with a brokered credential
// trust it; it signs only leaves for the hosts the broker serves.
var caName = secrets.Internal{Kind: "broker_ca", Name: "engrams-broker-ca", Purpose: "credential broker CA"}

const (
	caLifetime = 10 * 365 * 24 * time.Hour
	// leafLifetime is how long a leaf is valid; a cached one is renewed
	// when less than leafRenew is left.
	leafLifetime = 7 * 24 * time.Hour
	leafRenew    = 24 * time.Hour
	maxLeaves    = 1024 // cached leaves (one per brokered host name)
)

// authority is the loaded CA and the leaves it signed.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     *ecdsa.PrivateKey
	phKey   []byte // placeholder HMAC key, derived from the CA key
	mu      sync.Mutex
	leaves  map[string]*tls.Certificate
}

// caState caches the deployment's authority once read.
type caState struct {
	mu sync.Mutex
	ca *authority
}

// authority returns the deployment's CA, creating it on first use. A
// replica that loses the race to create it reads the winner's.
func (b *Broker) authority(ctx context.Context) (*authority, error) {
	b.ca.mu.Lock()
	defer b.ca.mu.Unlock()
	if b.ca.ca != nil {
		return b.ca.ca, nil
	}
	if b.sealer == nil {
		return nil, fmt.Errorf("broker CA: %w: this server keeps no secrets (no key configured), so it cannot broker credentials", domain.ErrInvalid)
	}
	plain, created, err := caName.Load(ctx, secrets.InternalDeps{Store: b.st, Sealer: b.sealer, Now: b.now, NewID: b.newID},
		func() ([]byte, error) { return newCA(b.now()) })
	if err != nil {
		return nil, fmt.Errorf("broker CA: %w", err)
	}
	defer clear(plain)
	a, err := parseAuthority(plain)
	if err != nil {
		return nil, err
	}
	if created {
		b.log.Info("credential broker CA created")
	}
	b.ca.ca = a
	return a, nil
}

// newCA is a new CA certificate and key, PEM, one after the other.
func newCA(now time.Time) ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "engrams credential broker CA", Organization: []string{"engrams"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...), nil
}

// parseAuthority reads a CA certificate and its key, PEM, one after the
// other.
func parseAuthority(plain []byte) (*authority, error) {
	certBlock, rest := pem.Decode(plain)
	keyBlock, _ := pem.Decode(rest)
	if certBlock == nil || keyBlock == nil {
		return nil, errors.New("broker CA: want a certificate and a key, PEM")
	}
	cert, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("broker CA certificate: %w", err)
	}
	key, err := x509.ParseECPrivateKey(keyBlock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("broker CA key: %w", err)
	}
	h := sha256.New()
	h.Write([]byte("engrams broker placeholders\x00"))
	h.Write(keyBlock.Bytes)
	return &authority{cert: cert, certPEM: pem.EncodeToMemory(certBlock), key: key, phKey: h.Sum(nil),
		leaves: map[string]*tls.Certificate{}}, nil
}

// leaf is a certificate for name signed by the CA, cached while it has
// long to live.
func (a *authority) leaf(name string, now time.Time) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[name]; ok && c.Leaf.NotAfter.Sub(now) > leafRenew {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", name, err)
	}
	if len(a.leaves) >= maxLeaves {
		clear(a.leaves)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}
	a.leaves[name] = c
	return c, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
