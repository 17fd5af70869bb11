package snapshots

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/keyed"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// roleMemory is the snapshot file chunked with Deps.MemoryChunks.
const roleMemory = "memory"

// Config is where the snapshot parts keep their files.
type Config struct {
	// DataDir holds shared-disks/, cached-snapshots/, captures/ and
	// image-captures/.
	DataDir string
}

// Deps are the collaborators.
type Deps struct {
	Backend vmm.Backend
	// DiskChunks stores snapshot files in the blob store: disk, device
	// state and every role but memory. nil: snapshots, restores and
	// captures are unsupported (Supported is false).
	DiskChunks ChunkStore
	// MemoryChunks stores the "memory" role; nil = DiskChunks.
	MemoryChunks ChunkStore
	// ChunkCache is the per-host chunk cache both stores fill; nil = no
	// cached snapshots reported, no prefetch.
	ChunkCache ChunkCache
	Logger     *slog.Logger
	Now        func() time.Time
	Facts      func() domain.HostFacts // this host, for the answers
	Capacity   Reserver                // image capture machines reserve capacity
	Lease      Lease                   // image captures run only within it
	// Checkpoint marks named points for fault tests (host.Deps.Checkpoint:
	// "snapshot-written", "snapshot-uploading"); nil: none.
	Checkpoint func(ctx context.Context, point string)
	// Pager serves restored memory lazily where the backend maps memory in
	// place; nil rebuilds it whole before the VMM starts.
	Pager Pager
}

// ChunkStore is what snapshots need of a chunk store; *chunk.Store
// satisfies it.
type ChunkStore interface {
	PutFile(ctx context.Context, path string) (chunk.Manifest, chunk.PutStats, error)
	PutFileOver(ctx context.Context, path string, parent chunk.Manifest) (chunk.Manifest, chunk.PutStats, error)
	PutReader(ctx context.Context, r io.Reader, size int64) (chunk.Manifest, chunk.PutStats, error)
	Verify(ctx context.Context, m chunk.Manifest) error
	VerifyData(ctx context.Context, m chunk.Manifest) error // fetches every chunk through the cache
	Restore(ctx context.Context, m chunk.Manifest, dst string) error
	// PutChanged and ReadChunk serve lazily restored memory (pager).
	PutChanged(ctx context.Context, r io.ReaderAt, parent chunk.Manifest, changed func(idx int) bool, fill func(idx int) error) (chunk.Manifest, chunk.PutStats, error)
	ReadChunk(ctx context.Context, m chunk.Manifest, idx int, dst []byte) error
}

// ChunkCache reports whether the per-host chunk cache holds a chunk;
// *chunk.Cache satisfies it.
type ChunkCache interface {
	Has(hash string) bool
}

// Reserver claims capacity for a machine that belongs to no session
// (machines.Registry does).
type Reserver interface {
	Reserve(key string, spec hostlink.MachineSpec) error
	Unreserve(key string)
}

// Lease is the host's self-fencing lease: no capture starts while it is
// expired, and one running is cancelled when it expires.
type Lease interface {
	Expired() bool
	Err() error // why, for the answer
	OpContext(parent context.Context) (context.Context, context.CancelFunc)
}

// Snapshots takes, restores and captures snapshots.
type Snapshots struct {
	cfg    Config
	deps   Deps
	log    *slog.Logger
	shared *sharedDisks
	cached *cachedSnapshots
	kept   keptAnswers
	pf     prefetcher

	lazyFiles lazyFiles // served memories of lazily restored machines

	captureLocks keyed.Mutex // one per image capture job
}

// New returns the snapshot parts; Run runs their prefetch.
func New(cfg Config, deps Deps) *Snapshots {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.MemoryChunks == nil {
		deps.MemoryChunks = deps.DiskChunks
	}
	if deps.Checkpoint == nil {
		deps.Checkpoint = func(context.Context, string) {}
	}
	return &Snapshots{
		cfg:    cfg,
		deps:   deps,
		log:    deps.Logger,
		shared: &sharedDisks{dataDir: cfg.DataDir, backend: deps.Backend, store: deps.DiskChunks, log: deps.Logger},
		cached: &cachedSnapshots{dataDir: cfg.DataDir, cache: deps.ChunkCache, log: deps.Logger},
		kept:   keptAnswers{dataDir: cfg.DataDir, log: deps.Logger},
		pf:     prefetcher{kick: make(chan struct{}, 1)},
	}
}

// Supported reports whether a chunk store is configured: without one,
// snapshots, restores, harness bundles and captures are refused.
func (s *Snapshots) Supported() bool { return s.deps.DiskChunks != nil }

func (s *Snapshots) storeFor(role string) ChunkStore {
	if role == roleMemory {
		return s.deps.MemoryChunks
	}
	return s.deps.DiskChunks
}

// Cached lists, most recent first, the snapshots taken or restored here
// whose every chunk the cache holds.
func (s *Snapshots) Cached() []string { return s.cached.list() }

// LoadCached reads the cached-snapshot records a previous agent left;
// call it before anything is reported.
func (s *Snapshots) LoadCached() { s.cached.load() }
