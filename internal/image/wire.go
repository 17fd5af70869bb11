package image

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// NewForBlobStore assembles the usual Materializer: an OCI puller (owners
// kept when run as root) dialling registries through registries (nil: no
// registry on a private or loopback address; see oci.Deps.Dialer), a
// deterministic ext4 builder and a disk chunk store over bs, all working in
// workDir. Call close when done.
func NewForBlobStore(bs blob.Store, workDir string, registries oci.Dialer, log *slog.Logger) (m *Materializer, closeFn func(), err error) {
	if err := os.MkdirAll(workDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("image work dir: %w", err)
	}
	cs, err := chunk.New(chunk.Config{ChunkSize: chunk.DiskChunkSize}, chunk.Deps{Blob: bs, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("image chunk store: %w", err)
	}
	b, err := vmimage.New(vmimage.Config{CacheDir: workDir, KernelImage: "/unused"}, vmimage.Deps{Logger: log})
	if err != nil {
		cs.Close()
		return nil, nil, fmt.Errorf("image builder: %w", err)
	}
	m, err = New(Config{WorkDir: workDir}, Deps{
		Puller: oci.New(oci.Config{SkipOwnership: os.Geteuid() != 0}, oci.Deps{Logger: log, Dialer: registries}),
		Imager: b, Chunks: cs, Logger: log,
	})
	if err != nil {
		cs.Close()
		return nil, nil, err
	}
	return m, cs.Close, nil
}
