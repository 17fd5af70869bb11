package harnessreg

import (
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/store"
)

// Config tunes the registry.
type Config struct {
	// WorkDir holds the trees of harness builds and uploads while they are
	// packed, each in a private directory; only this user (or root) may be
	// able to change it. Default: directly in $TMPDIR.
	WorkDir string
}

// Deps are what the registry needs.
type Deps struct {
	Store store.Harnesses
	// Builder builds harness bundles and Chunks stores their chunks; either
	// nil: harness build and add are refused, saying the server has no blob
	// store.
	Builder HarnessBuilder
	Chunks  ChunkPutter
	Logger  *slog.Logger
	Now     func() time.Time // default time.Now
	NewID   func() string    // default UUIDv7
}

// Registry builds, registers and looks up harness bundles, and pins them
// into session specs.
type Registry struct {
	st         store.Harnesses
	log        *slog.Logger
	now        func() time.Time
	newID      func() string
	harnessReg *harnessRegistry
}

// New returns the registry.
func New(cfg Config, deps Deps) (*Registry, error) {
	if deps.Store == nil {
		return nil, errors.New("new harness registry: Store is required")
	}
	r := &Registry{st: deps.Store, log: deps.Logger, now: deps.Now, newID: deps.NewID,
		harnessReg: newHarnessRegistry(deps.Builder, deps.Chunks, cfg.WorkDir)}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.now == nil {
		r.now = time.Now
	}
	if r.newID == nil {
		r.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return r, nil
}
