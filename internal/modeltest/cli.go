package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/testutil"
)

// The npm packages of the agent CLIs and the versions the tests pin. Both
// ship a native binary in a per-platform package: claude is a self-contained
// executable, codex a static musl one. Node.js runs only npm (and codex's
// optional launcher script), never the agents themselves.
const (
	ClaudePackage = "@anthropic-ai/claude-code"
	ClaudeVersion = "2.1.332"
	CodexPackage  = "@openai/codex"
	CodexVersion  = "0.171.0"
	// CodexModel is a model codex has built-in metadata for (its tools
	// then include apply_patch); an unknown one costs a warning event.
	CodexModel = "gpt-5.5"
)

// CacheDir is where test tools are cached: $ENGRAMS_TEST_CACHE, else
// $XDG_CACHE_HOME/engrams-test, else ~/.cache/engrams-test.
func CacheDir() string {
	if d := os.Getenv("ENGRAMS_TEST_CACHE"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "engrams-test")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "engrams-test")
	}
	return filepath.Join(home, ".cache", "engrams-test")
}

// NPMPrefix is the npm prefix the CLIs are installed under
// (scripts/install-deps.sh uses the same).
func NPMPrefix() string { return filepath.Join(CacheDir(), "npm") }

// ClaudeBinary is the native claude executable under an npm prefix.
func ClaudeBinary(prefix string) string {
	return filepath.Join(prefix, "node_modules", "@anthropic-ai", "claude-code-linux-x64", "claude")
}

// CodexBinary is the native codex executable under an npm prefix.
func CodexBinary(prefix string) string {
	return filepath.Join(prefix, "node_modules", "@openai", "codex-linux-x64", "vendor",
		"x86_64-unknown-linux-musl", "bin", "codex")
}

// installedVersion is the version in a platform package's package.json
// ("" when absent), without codex's "-linux-x64" suffix.
func installedVersion(pkgDir string) string {
	b, err := os.ReadFile(filepath.Join(pkgDir, "package.json"))
	if err != nil {
		return ""
	}
	var p struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(b, &p) != nil {
		return ""
	}
	return strings.TrimSuffix(p.Version, "-linux-x64")
}

// CLIsInstalled reports whether the pinned versions of both CLIs are under
// prefix.
func CLIsInstalled(prefix string) bool {
	nm := filepath.Join(prefix, "node_modules")
	return isExecutable(ClaudeBinary(prefix)) && isExecutable(CodexBinary(prefix)) &&
		installedVersion(filepath.Join(nm, "@anthropic-ai", "claude-code-linux-x64")) == ClaudeVersion &&
		installedVersion(filepath.Join(nm, "@openai", "codex-linux-x64")) == CodexVersion
}

// InstallCLIs installs the pinned CLI packages under prefix with npm, unless
// they are there already. Install scripts are not run: the tests use the
// native binaries of the platform packages, which need no script, so any
// Node.js that runs npm will do (claude's newer releases declare
// node >= 22 for their wrapper only). A lock file serializes concurrent
// callers.
func InstallCLIs(ctx context.Context, prefix string) error {
	if CLIsInstalled(prefix) {
		return nil
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return fmt.Errorf("install agent CLIs: npm not found: %w", err)
	}
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		return fmt.Errorf("install agent CLIs: create %s: %w", prefix, err)
	}
	lock, err := os.OpenFile(filepath.Join(prefix, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("install agent CLIs: open lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fmt.Errorf("install agent CLIs: lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if CLIsInstalled(prefix) {
		return nil
	}
	cmd := exec.CommandContext(ctx, npm, "install", "--prefix", prefix, "--no-audit", "--no-fund",
		"--ignore-scripts", "--save-exact", "--loglevel=error",
		ClaudePackage+"@"+ClaudeVersion, CodexPackage+"@"+CodexVersion)
	cmd.Env = append(os.Environ(), "npm_config_update_notifier=false")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("install agent CLIs: npm install: %w: %s", err, tail(out, 2000))
	}
	if !CLIsInstalled(prefix) {
		return fmt.Errorf("install agent CLIs: %s@%s or %s@%s missing under %s after npm install",
			ClaudePackage, ClaudeVersion, CodexPackage, CodexVersion, prefix)
	}
	return nil
}

var installOnce struct {
	sync.Mutex
	err  error
	done bool
}

// RequireCLIs returns the paths of the claude and codex binaries, installing
// them under NPMPrefix on first use. Without npm or the npm registry it
// skips the test (fails under CI=true).
func RequireCLIs(t testing.TB) (claude, codex string) {
	t.Helper()
	prefix := NPMPrefix()
	installOnce.Lock()
	if !installOnce.done {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		installOnce.err = InstallCLIs(ctx, prefix)
		cancel()
		installOnce.done = true
	}
	err := installOnce.err
	installOnce.Unlock()
	if err != nil {
		testutil.SkipOrFail(t, "agent CLIs unavailable (scripts/install-deps.sh installs them): %v", err)
	}
	return ClaudeBinary(prefix), CodexBinary(prefix)
}

// BaseEnv is a minimal environment for running an agent CLI: PATH, a
// private HOME, a UTF-8 locale, and the variables that keep either CLI from
// phoning home (telemetry, error reports, auto-update, feedback surveys).
func BaseEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"LANG=C.UTF-8",
		"TERM=dumb",
		"NO_COLOR=1",
		"TMPDIR=" + os.TempDir(),
		// claude
		"DISABLE_TELEMETRY=1",
		"DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_BUG_COMMAND=1",
		"DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1",
		"CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1",
		// codex
		"CODEX_DISABLE_UPDATE_CHECK=1",
	}
}

// ClaudeEnv is BaseEnv plus the variables that point claude at a scripted
// server: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY.
func ClaudeEnv(home, baseURL, apiKey string) []string {
	return append(BaseEnv(home),
		"ANTHROPIC_BASE_URL="+baseURL,
		"ANTHROPIC_API_KEY="+apiKey,
	)
}

// CodexConfig is a codex config.toml whose default model provider is the
// scripted server at baseURL (the OpenAI base URL, ending in /v1), its key
// read from OPENAI_API_KEY, with analytics, update checks, feedback upload,
// web search and the plugin and app features (which reach outside hosts at
// start-up) off. It passes codex exec --strict-config.
func CodexConfig(baseURL string) string {
	return fmt.Sprintf(`model = %q
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

# The curated plugin sync reaches github.com, api.github.com and chatgpt.com
# at every start; apps reach chatgpt.com.
[features]
plugins = false
remote_plugin = false
apps = false
shell_snapshot = false

[model_providers.scripted]
name = "scripted"
base_url = %q
env_key = "OPENAI_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, CodexModel, baseURL)
}

// CodexEnv writes CodexConfig into codexHome and returns BaseEnv plus
// CODEX_HOME and OPENAI_API_KEY.
func CodexEnv(home, codexHome, baseURL, apiKey string) ([]string, error) {
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return nil, fmt.Errorf("create codex home: %w", err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(CodexConfig(baseURL)), 0o600); err != nil {
		return nil, fmt.Errorf("write codex config: %w", err)
	}
	return append(BaseEnv(home), "CODEX_HOME="+codexHome, "OPENAI_API_KEY="+apiKey), nil
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func tail(b []byte, n int) string {
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}
