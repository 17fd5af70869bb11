package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// env returns $ENGRAMS_<name> or def: every flag can come from the
// environment, which suits systemd units and Helm charts.
func env(name, def string) string {
	if v := os.Getenv("ENGRAMS_" + name); v != "" {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v := os.Getenv("ENGRAMS_" + name); v != "" {
		if d, err := time.ParseDuration(v); err == nil {
			return d
		}
	}
	return def
}

// defaultDataDir is where dev keeps its database, machines and secrets.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "engrams")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".engrams"
	}
	return filepath.Join(home, ".local", "share", "engrams")
}

// siblingBinary finds a helper binary installed next to this one.
func siblingBinary(name string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: %w", name, err)
	}
	p := filepath.Join(filepath.Dir(exe), name)
	if _, err := os.Stat(p); err != nil {
		if strings.Contains(exe, "go-build") {
			return "", fmt.Errorf("%s not found next to a `go run` binary; build both with `CGO_ENABLED=0 go build -o bin/ ./cmd/...` and run bin/engrams", name)
		}
		return "", fmt.Errorf("%s not found next to %s: build it with `CGO_ENABLED=0 go build -o %s ./cmd/%s`", name, exe, filepath.Dir(exe), name)
	}
	return p, nil
}
