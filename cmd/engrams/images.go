package main

import (
	"log/slog"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/imagejobs"
)

// imageMaterializer builds what a coordinator needs to enable images; it
// returns nil (images cannot be enabled) when bs is nil.
func imageMaterializer(bs blob.Store, workDir string, log *slog.Logger) (imagejobs.Materializer, func(), error) {
	if bs == nil {
		return nil, func() {}, nil
	}
	m, closeFn, err := image.NewForBlobStore(bs, workDir, log)
	if err != nil {
		return nil, nil, err
	}
	return m, closeFn, nil
}
