package guestapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/netpolicy"
)

// A harness bundle is a read-only tree with harness.json (HarnessDescriptor) at its
// root: the host builds and mounts it, the guest adapter reads it.

// Where and how the guest sees a bundle.
const (
	// HarnessMountPoint is where the guest mounts a harness bundle, read-only.
	// Entrypoint paths are relative to it.
	HarnessMountPoint = "/.engrams-harness"
	// HarnessFSType is the bundle image's file system type.
	HarnessFSType = "erofs"
	// HarnessDescriptorFile is the descriptor's name at the bundle root.
	HarnessDescriptorFile = "harness.json"
	// HarnessDescriptorFormat is the only descriptor format there is.
	HarnessDescriptorFormat = 1
	// MaxHarnessDescriptorBytes bounds harness.json.
	MaxHarnessDescriptorBytes = 64 << 10
)

// Protocols: how the guest adapter talks to the harness process.
const (
	// HarnessProtocolClaudeStreamJSON is Claude Code's --input-format stream-json
	// --output-format stream-json.
	HarnessProtocolClaudeStreamJSON = "claude-stream-json"
	// HarnessProtocolCodexJSON is codex's JSON protocol: the adapter runs
	// `codex app-server` (JSON-RPC over stdio), one process a conversation.
	HarnessProtocolCodexJSON = "codex-json"
	// HarnessProtocolShell is the line protocol of the shell harness (shell_protocol.go).
	HarnessProtocolShell = "shell"
)

// C libraries a harness may require of the image. The values are those of
// image.Libc*.
const (
	LibcGlibc = "glibc"
	LibcMusl  = "musl"
	LibcNone  = "none" // static programs only: runs on any image
)

// AnyModel, listed among a descriptor's models (never first), lets a profile
// name a model the list does not.
const AnyModel = "*"

// Error categories; every descriptor error this package returns wraps one.
var (
	// ErrInvalidHarnessDescriptor: harness.json is missing, malformed or refused.
	ErrInvalidHarnessDescriptor = errors.New("invalid harness descriptor")
	// ErrHarnessIncompatible: the harness cannot run on the image (HarnessRequires.Compatible).
	ErrHarnessIncompatible = errors.New("harness incompatible with the image")
)

// HarnessDescriptor is harness.json: what a harness is and what it needs.
type HarnessDescriptor struct {
	Format  int    `json:"format"`  // HarnessDescriptorFormat
	Name    string `json:"name"`    // e.g. "claude-code"; safe as a path component
	Version string `json:"version"` // e.g. "2.1.197"; safe as a path component
	// Entrypoint is the argv that starts the harness; every element is a
	// path relative to the bundle root (Argv makes them absolute), e.g.
	// ["bin/node", "lib/claude-code/cli.js"]. The adapter appends the
	// protocol's own arguments.
	Entrypoint []string `json:"entrypoint"`
	Protocol   string   `json:"protocol"` // Protocol*
	// Models and Modes the harness offers, the default first. AnyModel
	// among the models admits others.
	Models      []string            `json:"models"`
	Modes       []string            `json:"modes"`
	Credentials []HarnessCredential `json:"credentials"`
	// Hosts the harness must reach: "host" or "host:port" (a leading "*."
	// matches subdomains).
	Hosts    []string        `json:"hosts"`
	Requires HarnessRequires `json:"requires"`
}

// HarnessCredential is one secret the harness reads from its environment.
type HarnessCredential struct {
	Kind string `json:"kind"` // e.g. "anthropic_api_key"
	Env  string `json:"env"`  // variable holding it, e.g. "ANTHROPIC_API_KEY"
	// BaseURLEnv, when set, is the variable that points the harness at its
	// provider (the model gateway), e.g. "ANTHROPIC_BASE_URL".
	BaseURLEnv string `json:"base_url_env,omitempty"`
}

// HarnessRequires is what the harness needs of the image it runs on.
type HarnessRequires struct {
	Libc string `json:"libc"` // Libc*; LibcNone runs anywhere
	// GlibcMin is the oldest glibc ("2.28") its programs link against.
	GlibcMin string `json:"glibc_min,omitempty"`
	// Libs are shared libraries (sonames) the image must provide beyond its
	// C library, e.g. "libstdc++.so.6".
	Libs []string `json:"libs,omitempty"`
}

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	kindRE    = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	envRE     = regexp.MustCompile(`^[A-Z_][A-Z0-9_]{0,127}$`)
	glibcRE   = regexp.MustCompile(`^[0-9]{1,3}\.[0-9]{1,3}$`)
	sonameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)
)

// ParseHarnessDescriptor decodes and validates harness.json: unknown fields,
// trailing data and every rule of Validate are refused.
func ParseHarnessDescriptor(data []byte) (HarnessDescriptor, error) {
	var d HarnessDescriptor
	if len(data) > MaxHarnessDescriptorBytes {
		return d, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalidHarnessDescriptor, len(data), MaxHarnessDescriptorBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return HarnessDescriptor{}, fmt.Errorf("%w: %v", ErrInvalidHarnessDescriptor, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return HarnessDescriptor{}, fmt.Errorf("%w: data after the JSON object", ErrInvalidHarnessDescriptor)
	}
	if err := d.Validate(); err != nil {
		return HarnessDescriptor{}, err
	}
	return d, nil
}

// LoadHarnessDescriptor reads and validates dir/harness.json, which must be a
// regular file (not a symlink).
func LoadHarnessDescriptor(dir string) (HarnessDescriptor, error) {
	p := filepath.Join(dir, HarnessDescriptorFile)
	st, err := os.Lstat(p)
	if err != nil {
		return HarnessDescriptor{}, fmt.Errorf("%w: %v", ErrInvalidHarnessDescriptor, err)
	}
	if !st.Mode().IsRegular() {
		return HarnessDescriptor{}, fmt.Errorf("%w: %s is not a regular file", ErrInvalidHarnessDescriptor, p)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return HarnessDescriptor{}, fmt.Errorf("%w: %v", ErrInvalidHarnessDescriptor, err)
	}
	d, err := ParseHarnessDescriptor(data)
	if err != nil {
		return HarnessDescriptor{}, fmt.Errorf("load %s: %w", p, err)
	}
	return d, nil
}

// Marshal returns the descriptor as harness.json holds it (indented, with a
// final newline), after validating it.
func (d HarnessDescriptor) Marshal() ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	for _, l := range []*[]string{&d.Entrypoint, &d.Models, &d.Modes, &d.Hosts} {
		if *l == nil {
			*l = []string{}
		}
	}
	if d.Credentials == nil {
		d.Credentials = []HarnessCredential{}
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal descriptor: %w", err)
	}
	return append(b, '\n'), nil
}

// Argv is the entrypoint with every element made absolute under mount
// (HarnessMountPoint in the guest, the staged tree on a host).
func (d HarnessDescriptor) Argv(mount string) []string {
	argv := make([]string, len(d.Entrypoint))
	for i, p := range d.Entrypoint {
		argv[i] = filepath.Join(mount, filepath.FromSlash(p))
	}
	return argv
}

// Validate checks every field; the error wraps ErrInvalidHarnessDescriptor and
// lists every problem found.
func (d HarnessDescriptor) Validate() error {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if d.Format != HarnessDescriptorFormat {
		bad("format is %d, want %d", d.Format, HarnessDescriptorFormat)
	}
	if !nameRE.MatchString(d.Name) {
		bad("name %q: want 1-64 of a-z 0-9 . _ - starting with a letter or digit", d.Name)
	}
	if !versionRE.MatchString(d.Version) {
		bad("version %q: want 1-64 of A-Z a-z 0-9 . _ + - starting with a letter or digit", d.Version)
	}
	if len(d.Entrypoint) == 0 || len(d.Entrypoint) > 16 {
		bad("entrypoint has %d elements, want 1 to 16", len(d.Entrypoint))
	}
	for i, p := range d.Entrypoint {
		if err := CheckHarnessPath(p); err != nil {
			bad("entrypoint[%d]: %v", i, err)
		}
	}
	switch d.Protocol {
	case HarnessProtocolClaudeStreamJSON, HarnessProtocolCodexJSON, HarnessProtocolShell:
	default:
		bad("protocol %q: want %s, %s or %s", d.Protocol, HarnessProtocolClaudeStreamJSON, HarnessProtocolCodexJSON, HarnessProtocolShell)
	}
	checkChoices("models", d.Models, true, bad)
	checkChoices("modes", d.Modes, false, bad)
	checkCredentials(d.Credentials, bad)
	checkHosts(d.Hosts, bad)
	checkRequires(d.Requires, bad)
	if len(probs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidHarnessDescriptor, strings.Join(probs, "; "))
	}
	return nil
}

// CheckHarnessPath refuses anything but a clean relative slash path that
// stays inside the bundle (an entrypoint element, a file of the tree).
func CheckHarnessPath(p string) error {
	switch {
	case p == "" || len(p) > 1024:
		return fmt.Errorf("path %q: want 1 to 1024 bytes", p)
	case !utf8.ValidString(p) || strings.ContainsFunc(p, unicode.IsControl) || strings.Contains(p, `\`):
		return fmt.Errorf("path %q: control characters, backslashes and invalid UTF-8 are refused", p)
	case path.IsAbs(p):
		return fmt.Errorf("path %q is absolute; want it relative to the bundle root", p)
	case p == "." || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return fmt.Errorf("path %q leaves the bundle", p)
	case path.Clean(p) != p:
		return fmt.Errorf("path %q is not clean (want %q)", p, path.Clean(p))
	}
	return nil
}

// checkChoices checks a list of models or modes: short printable names
// without spaces, no duplicates; AnyModel (models only) never first.
func checkChoices(field string, list []string, wildcard bool, bad func(string, ...any)) {
	if len(list) > 256 {
		bad("%s: %d entries, at most 256", field, len(list))
		return
	}
	seen := map[string]bool{}
	for i, s := range list {
		switch {
		case len(s) == 0 || len(s) > 128 || !utf8.ValidString(s) ||
			strings.ContainsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			bad("%s[%d] %q: want 1-128 printable characters without spaces", field, i, s)
		case seen[s]:
			bad("%s[%d] %q is listed twice", field, i, s)
		case s == AnyModel && (!wildcard || i == 0):
			bad("%s[%d]: %q is allowed only in models, after the default", field, i, s)
		}
		seen[s] = true
	}
}

func checkCredentials(creds []HarnessCredential, bad func(string, ...any)) {
	envs := map[string]bool{}
	for i, c := range creds {
		if !kindRE.MatchString(c.Kind) {
			bad("credentials[%d].kind %q: want a-z 0-9 _ starting with a letter", i, c.Kind)
		}
		for _, e := range []struct{ field, v string }{{"env", c.Env}, {"base_url_env", c.BaseURLEnv}} {
			switch {
			case e.v == "" && e.field == "base_url_env":
			case !envRE.MatchString(e.v):
				bad("credentials[%d].%s %q: want an environment variable name (A-Z 0-9 _)", i, e.field, e.v)
			case envs[e.v]:
				bad("credentials[%d].%s %q is used twice", i, e.field, e.v)
			}
			envs[e.v] = true
		}
	}
}

func checkHosts(hosts []string, bad func(string, ...any)) {
	seen := map[string]bool{}
	for i, h := range hosts {
		if err := CheckEgressHost(h); err != nil {
			bad("hosts[%d]: %v", i, err)
		} else if seen[h] {
			bad("hosts[%d] %q is listed twice", i, h)
		}
		seen[h] = true
	}
}

// CheckEgressHost accepts a host a guest may reach: "name", "name:port",
// "*.name[:port]", an IP address or "[v6]:port"; names are lower-case DNS
// names. netpolicy.ParsePattern is the one parser of these entries.
func CheckEgressHost(h string) error {
	_, err := netpolicy.ParsePattern(h)
	return err
}

func checkRequires(r HarnessRequires, bad func(string, ...any)) {
	switch r.Libc {
	case LibcGlibc, LibcMusl, LibcNone:
	default:
		bad("requires.libc %q: want %s, %s or %s", r.Libc, LibcGlibc, LibcMusl, LibcNone)
	}
	if r.GlibcMin != "" && (r.Libc != LibcGlibc || !glibcRE.MatchString(r.GlibcMin)) {
		bad("requires.glibc_min %q: want MAJOR.MINOR, with libc %q", r.GlibcMin, LibcGlibc)
	}
	if len(r.Libs) > 0 && r.Libc == LibcNone {
		bad("requires.libs: a harness with libc %q loads no shared libraries", LibcNone)
	}
	for i, l := range r.Libs {
		if !sonameRE.MatchString(l) {
			bad("requires.libs[%d] %q: want a library soname such as libstdc++.so.6", i, l)
		}
	}
}

// Compatible says whether the harness runs on an image whose C library is
// libc (image.Libc*) and, when known, whose glibc version is glibcVersion
// ("2.36"; "" when unknown). The error wraps ErrHarnessIncompatible.
func (r HarnessRequires) Compatible(libc, glibcVersion string) error {
	switch {
	case r.Libc == LibcNone:
		return nil
	case libc != r.Libc:
		return fmt.Errorf("%w: it needs %s, the image has %s", ErrHarnessIncompatible, r.Libc, libc)
	case r.GlibcMin != "" && glibcVersion != "" && CompareVersions(glibcVersion, r.GlibcMin) < 0:
		return fmt.Errorf("%w: it needs glibc %s or newer, the image has %s", ErrHarnessIncompatible, r.GlibcMin, glibcVersion)
	}
	return nil
}

// CompareVersions compares dotted numeric versions ("2.28" < "2.36");
// parts that are not numbers count as 0.
func CompareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}
