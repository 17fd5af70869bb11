package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// npm packages the codex harness is assembled from.
const (
	CodexPackage = "@openai/codex"
	// CodexPlatformDep is the optional dependency naming the linux x86-64
	// build (an alias such as "npm:@openai/codex@0.171.0-linux-x64").
	CodexPlatformDep = "@openai/codex-linux-x64"
	// codexTarget is the vendored build's directory: a static musl program.
	codexTarget = "vendor/x86_64-unknown-linux-musl/"
	// codexDir is where the vendored build lands in the bundle.
	codexDir = "lib/codex"
)

// codexLeftOut are parts of the vendored build a headless agent does not
// use: the voice helper and its GStreamer libraries, linked against glibc.
var codexLeftOut = []string{"codex-resources/voice/"}

// stageCodex assembles codex: the vendored linux x86-64 build (from the
// platform package, or from the main package in versions that carry every
// platform) under lib/codex, laid out as its codex-package.json says.
func (b *Builder) stageCodex(ctx context.Context, spec BuiltinSpec, dir string) (guestapi.HarnessDescriptor, error) {
	m, err := b.manifest(ctx, CodexPackage, spec.Version)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	src := m
	if dep, ok := m.OptionalDependencies[CodexPlatformDep]; ok {
		name, version := depTarget(CodexPlatformDep, dep)
		if src, err = b.manifest(ctx, name, version); err != nil {
			return guestapi.HarnessDescriptor{}, err
		}
	}
	tgz, err := b.tarball(ctx, src)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	err = extractTarball(tgz, dir, func(rel string) (string, bool) {
		sub, ok := strings.CutPrefix(rel, codexTarget)
		if !ok || sub == "" {
			return "", false
		}
		for _, p := range codexLeftOut {
			if strings.HasPrefix(sub+"/", p) {
				return "", false
			}
		}
		return codexDir + "/" + sub, true
	})
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	entry, err := codexEntrypoint(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, fmt.Errorf("%s@%s: %w", src.Name, src.Version, err)
	}
	req, err := requiresOf(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, err
	}
	return guestapi.HarnessDescriptor{
		Format: guestapi.HarnessDescriptorFormat, Name: BuiltinCodex, Version: m.Version,
		Entrypoint: []string{entry}, Protocol: guestapi.HarnessProtocolCodexJSON,
		Models: []string{"gpt-5.5", "gpt-5.4", "gpt-5.3-codex", guestapi.AnyModel},
		Modes:  []string{"danger-full-access", "workspace-write", "read-only"},
		Credentials: []guestapi.HarnessCredential{{
			Kind: "openai_api_key", Env: "OPENAI_API_KEY", BaseURLEnv: "OPENAI_BASE_URL",
		}},
		Hosts:    []string{"api.openai.com:443"},
		Requires: req,
	}, nil
}

// codexEntrypoint finds the codex program: codex-package.json's entrypoint
// (layout 1), else codex/codex (older packages).
func codexEntrypoint(dir string) (string, error) {
	root := filepath.Join(dir, filepath.FromSlash(codexDir))
	var pkg struct {
		Entrypoint string `json:"entrypoint"`
	}
	rel := "codex/codex"
	if data, err := os.ReadFile(filepath.Join(root, "codex-package.json")); err == nil {
		if err := json.Unmarshal(data, &pkg); err != nil || guestapi.CheckHarnessPath(pkg.Entrypoint) != nil {
			return "", fmt.Errorf("%w: codex-package.json has no usable entrypoint", ErrUnsupportedPackage)
		}
		rel = pkg.Entrypoint
	}
	st, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: no executable %s in %s", ErrUnsupportedPackage, rel, strings.TrimSuffix(codexTarget, "/"))
	}
	return path.Join(codexDir, rel), nil
}
