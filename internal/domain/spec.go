package domain

import (
	"fmt"
	"net"
	"net/url"
	"strings"
)

// DesiredState is what the coordinator wants a session to be, stored apart
// from the state hosts report.
type DesiredState string

// Desired states.
const (
	DesireActive  DesiredState = "active"
	DesireIdle    DesiredState = "idle"
	DesireDeleted DesiredState = "deleted"
)

// DesiredStates lists every desired state.
var DesiredStates = []DesiredState{DesireActive, DesireIdle, DesireDeleted}

// Valid reports whether d is a known desired state.
func (d DesiredState) Valid() bool {
	switch d {
	case DesireActive, DesireIdle, DesireDeleted:
		return true
	}
	return false
}

// Bounds on what a session spec (and a profile's env) may carry.
const (
	MaxEnvVars  = 256
	MaxEnvBytes = 64 << 10 // names and values, plus two bytes each
	MaxImageRef = 512
)

// SessionSpec is what a session runs with, as the coordinator records it.
// Its JSON is the stored form.
type SessionSpec struct {
	MemoryMiB int               `json:"memory_mib"`
	VCPUs     int               `json:"vcpus"`
	Env       map[string]string `json:"env,omitempty"`
	Image     string            `json:"image,omitempty"` // enabled image name (or id) the session starts from
	// ImageID and BaseSnapshotID pin the image and the base snapshot the
	// session was created from (set by the coordinator).
	ImageID        ImageID    `json:"image_id,omitempty"`
	BaseSnapshotID SnapshotID `json:"base_snapshot_id,omitempty"`
	// Harness is the agent harness the session runs, "name" (newest) or
	// "name@version"; HarnessID pins the one chosen (set by the coordinator).
	Harness   string `json:"harness,omitempty"`
	HarnessID string `json:"harness_id,omitempty"`
	// IdleTimeoutSec: no activity this long suspends the session (0: the
	// coordinator's default; negative: never).
	IdleTimeoutSec int `json:"idle_timeout_s,omitempty"`
	// MaxLifetimeSec: the session ends Dead this long after it was created
	// (0: the coordinator's default; negative: no limit).
	MaxLifetimeSec int `json:"max_lifetime_s,omitempty"`
	// Credentials are the secrets the model gateway may use for this
	// session, pinned when the session is created (never taken from a
	// user's request) and read only by the coordinator.
	Credentials []CredentialGrant `json:"credentials,omitempty"`
	// Egress lists what the session's guest may reach ("name",
	// "name:port", "*.suffix[:port]"; guestapi.CheckEgressHost), pinned at
	// create: the request's or profile's list plus the hosts its harness
	// names, sorted, each once. Empty: the guest has no network at all.
	Egress []string `json:"egress,omitempty"`
	// Brokered are the hosts whose HTTPS requests the coordinator's
	// credential broker sends with a secret in (a repo credential's git
	// host), pinned at create by the coordinator, never taken from a
	// user's request; each host is also in Egress.
	Brokered []BrokeredGrant `json:"brokered,omitempty"`
	// Owner is whose the session is (its task's, or the person's who
	// created it), set by the API or the tasks service from who asked,
	// never from a request's body; kept in its own columns, never sent
	// to a host.
	Owner Owner `json:"-"`
}

// PlaceholderPrefix starts every credential placeholder a guest is given
// (the model gateway's and the credential broker's), so the egress proxy
// can see one sent in the clear to a host it is not for.
const PlaceholderPrefix = "engrams-ph-"

// BrokeredGrant lets the credential broker put one secret into requests to
// one host: the guest holds a session-scoped placeholder in its place.
type BrokeredGrant struct {
	Host     string   `json:"host"` // "name:port", lower case
	SecretID SecretID `json:"secret_id"`
	// Access are the repositories on Host the broker serves requests for,
	// each with what it allows; a GitHub App's tokens are scoped to them.
	// A grant without any (a session row written before they were
	// recorded, whose "repos" key is no longer read) allows no request.
	Access []RepoAccess `json:"access,omitempty"`
}

// RepoAccess is one repository of a brokered grant: git fetch always,
// git push with Push, the host's REST API for the repository with API
// (writes only with Push as well).
type RepoAccess struct {
	// Path is the repository URL's path on its host without .git, as
	// the URL spells it ("/acme/app").
	Path string `json:"path"`
	Push bool   `json:"push,omitempty"`
	API  bool   `json:"api,omitempty"`
}

// Name is the repository's name: Path's last element (what a GitHub App
// token is scoped to).
func (r RepoAccess) Name() string {
	return r.Path[strings.LastIndexByte(r.Path, '/')+1:]
}

// BrokeredHosts are the hosts of s.Brokered, in order.
func (s SessionSpec) BrokeredHosts() []string {
	var out []string
	for _, b := range s.Brokered {
		out = append(out, b.Host)
	}
	return out
}

// BrokeredGrant returns the grant for hostPort.
func (s SessionSpec) BrokeredGrant(hostPort string) (BrokeredGrant, bool) {
	for _, b := range s.Brokered {
		if b.Host == hostPort {
			return b, true
		}
	}
	return BrokeredGrant{}, false
}

// CredentialGrant lets the model gateway use one secret for one credential
// kind ("anthropic_api_key", "openai_api_key") of a session: the guest
// holds a session-scoped placeholder, the coordinator swaps in the secret.
type CredentialGrant struct {
	Kind     string   `json:"kind"`
	SecretID SecretID `json:"secret_id"`
}

// Grant returns the session's grant for a credential kind.
func (s SessionSpec) Grant(kind string) (CredentialGrant, bool) {
	for _, g := range s.Credentials {
		if g.Kind == kind {
			return g, true
		}
	}
	return CredentialGrant{}, false
}

// CheckEnv checks an environment against the bounds of a session spec;
// errors wrap ErrInvalid.
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("%w: at most %d env variables, got %d", ErrInvalid, MaxEnvVars, len(env))
	}
	total := 0
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: env name %q is not valid", ErrInvalid, k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: env %s contains a NUL byte", ErrInvalid, k)
		}
		total += len(k) + len(v) + 2
	}
	if total > MaxEnvBytes {
		return fmt.Errorf("%w: env is %d bytes, at most %d", ErrInvalid, total, MaxEnvBytes)
	}
	return nil
}

// BrokeredRepoPath is the path a repository is served under on its
// brokered host: its URL's path, as escaped there, without a trailing
// slash or .git ("/acme/app"). A path with no element, an empty, "." or
// ".." element, or a backslash or percent sign is none.
func BrokeredRepoPath(repoURL string) (string, bool) {
	u, err := url.Parse(repoURL)
	if err != nil {
		return "", false
	}
	p := strings.TrimSuffix(strings.TrimSuffix(u.EscapedPath(), "/"), ".git")
	if !(RepoAccess{Path: p}).Valid() {
		return "", false
	}
	return p, true
}

// Valid reports whether r's path is one BrokeredRepoPath gives: "/" and
// elements, none empty, "." or "..", without a backslash, percent sign,
// query or control character, at most 1024 bytes.
func (r RepoAccess) Valid() bool {
	p := r.Path
	if !strings.HasPrefix(p, "/") || len(p) > 1024 || strings.ContainsFunc(p, func(c rune) bool {
		return c <= ' ' || c == 0x7f || c == '\\' || c == '%' || c == '?' || c == '#'
	}) {
		return false
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// BrokeredHostOf is the "name:port" a repository's pushes and API calls are
// brokered on: its https URL's host, when that is a name (a repository
// over plain http or at an address is cloned, never brokered).
func BrokeredHostOf(repoURL string) (string, bool) {
	u, err := url.Parse(repoURL)
	if err != nil || u.Scheme != "https" || u.Hostname() == "" || net.ParseIP(u.Hostname()) != nil {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port), true
}
