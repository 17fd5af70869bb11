package modeltest_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/engrams/engrams/internal/modeltest"
)

// TestInstallDepsPinsMatch: scripts/install-deps.sh installs the versions
// the tests look for.
func TestInstallDepsPinsMatch(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "scripts", "install-deps.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, want string }{
		{"claude_version", modeltest.ClaudeVersion},
		{"codex_version", modeltest.CodexVersion},
	} {
		m := regexp.MustCompile(`(?m)^` + tt.name + `=(\S+)$`).FindSubmatch(b)
		if m == nil || string(m[1]) != tt.want {
			t.Errorf("install-deps.sh %s = %q, want %q", tt.name, m, tt.want)
		}
	}
}

func TestCLIsInstalled(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		claude, codex string // versions written; "" writes no package
		want          bool
	}{
		{"pinned", modeltest.ClaudeVersion, modeltest.CodexVersion + "-linux-x64", true},
		{"old claude", "2.0.0", modeltest.CodexVersion + "-linux-x64", false},
		{"codex missing", modeltest.ClaudeVersion, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			prefix := t.TempDir()
			write := func(bin, version string) {
				if version == "" {
					return
				}
				pkg := filepath.Dir(bin)
				if filepath.Base(pkg) == "bin" { // codex: vendor/<triple>/bin/codex
					pkg = filepath.Join(pkg, "..", "..", "..")
				}
				if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"version": "`+version+`"}`), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(modeltest.ClaudeBinary(prefix), tt.claude)
			write(modeltest.CodexBinary(prefix), tt.codex)
			if got := modeltest.CLIsInstalled(prefix); got != tt.want {
				t.Errorf("CLIsInstalled = %v, want %v", got, tt.want)
			}
		})
	}
}
