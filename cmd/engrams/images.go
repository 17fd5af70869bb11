package main

import (
	"fmt"
	"log/slog"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/secret"
)

// imageMaterializer builds what a coordinator needs to enable images; it
// returns nil (images cannot be enabled) when bs is nil.
func imageMaterializer(bs blob.Store, workDir string, log *slog.Logger) (coordinator.Materializer, func(), error) {
	if bs == nil {
		return nil, func() {}, nil
	}
	m, closeFn, err := image.NewForBlobStore(bs, workDir, log)
	if err != nil {
		return nil, nil, err
	}
	return m, closeFn, nil
}

// secrets opens (creating it on first use) the key that seals registry
// credentials; no path means none is kept.
func secrets(path string) (coordinator.Sealer, error) {
	if path == "" {
		return nil, nil
	}
	s, err := secret.LoadOrCreate(path)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return s, nil
}
