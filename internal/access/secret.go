package access

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
)

// SecretPrefix starts every secret engrams mints, so leaked ones are easy
// to scan for.
const SecretPrefix = "egr_"

// NewSecret returns a fresh key or sign-in secret (32 random bytes) and
// its visible prefix.
func NewSecret() (secret, prefix string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, secret[:len(SecretPrefix)+6]
}

// HashSecret is what the store keeps of a secret: its hex SHA-256.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CSRFToken is the anti-forgery token of a browser sign-in: derived from
// its secret, so only a page that was given it (in the readable CSRF
// cookie the sign-in sets) can send it back with a write, and a forged
// cross-site request, which carries the cookie but cannot read it,
// cannot.
func CSRFToken(secret string) string {
	sum := sha256.Sum256([]byte("engrams csrf\x00" + secret))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// CSRFMatches compares a presented anti-forgery token in constant time.
func CSRFMatches(secret, presented string) bool {
	return presented != "" && subtle.ConstantTimeCompare([]byte(CSRFToken(secret)), []byte(presented)) == 1
}

// CheckName returns what is wrong with a host or token name, or "".
func CheckName(n string) string {
	if n == "" || len(n) > 63 {
		return "name must be 1 to 63 characters"
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "name may contain only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

// NewLinkCode is a code a person says to an integration to link their
// account: 80 random bits as four groups of four base32 letters and
// digits (no padding, no lower case: easy to read and type).
func NewLinkCode() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	s := base32.StdEncoding.EncodeToString(b)
	return s[0:4] + "-" + s[4:8] + "-" + s[8:12] + "-" + s[12:16]
}
