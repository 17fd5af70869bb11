package main

import (
	"log/slog"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/netpolicy"
)

// imageMaterializer builds what a coordinator needs to enable images,
// dialling registries through registries; it returns nil (images cannot be
// enabled) when bs is nil.
func imageMaterializer(bs blob.Store, workDir string, registries *netpolicy.Guard, log *slog.Logger) (imagejobs.Materializer, func(), error) {
	if bs == nil {
		return nil, func() {}, nil
	}
	m, closeFn, err := image.NewForBlobStore(bs, workDir, registries, log)
	if err != nil {
		return nil, nil, err
	}
	return m, closeFn, nil
}
