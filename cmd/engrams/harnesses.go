package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/harnessreg"
)

// harnessFlags say where harness builds fetch npm packages from and keep
// their downloads and scratch trees.
type harnessFlags struct {
	registry, cacheDir, workDir string
}

func (f *harnessFlags) register(fs *pflag.FlagSet, defWork, defCache string) {
	fs.StringVar(&f.registry, "npm-registry", env("NPM_REGISTRY", harness.DefaultRegistry), "npm registry `URL` built-in harnesses (claude-code, codex) are fetched from")
	fs.StringVar(&f.cacheDir, "harness-cache-dir", env("HARNESS_CACHE_DIR", defCache), "`DIR` keeping verified npm downloads across harness builds")
	fs.StringVar(&f.workDir, "harness-work-dir", env("HARNESS_WORK_DIR", defWork), "scratch `DIR` for harness builds and uploads (trees and bundles while they are packed)")
}

// defaultHarnessCache is the user's cache dir, else under the work dir.
func defaultHarnessCache(workDir string) string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "engrams", "harness-npm")
	}
	return filepath.Join(workDir, "npm-cache")
}

// open builds what the harness registry needs to build bundles and sets
// its work dir in reg; nothing (harnesses cannot be registered) when bs is
// nil.
func (f *harnessFlags) open(bs blob.Store, reg *harnessreg.Config, log *slog.Logger) (harnessreg.HarnessBuilder, harnessreg.ChunkPutter, func(), error) {
	if bs == nil {
		return nil, nil, func() {}, nil
	}
	reg.WorkDir = filepath.Join(f.workDir, "trees")
	b, err := harness.New(harness.Config{OutDir: filepath.Join(f.workDir, "bundles"), WorkDir: filepath.Join(f.workDir, "stage"),
		CacheDir: f.cacheDir, Registry: f.registry}, harness.Deps{Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("harness builder: %w", err)
	}
	cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("harness chunk store: %w", err)
	}
	return b, cs, cs.Close, nil
}
