package imagejobs

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/store"
)

// Config tunes image enable jobs.
type Config struct {
	DefaultVCPUs   int           // vCPUs of an image's sessions unless enabled with others; default 1
	MaxMemoryMiB   int           // default 16384
	MaxVCPUs       int           // default 16
	PlacementWait  time.Duration // how long a capture looks for a host; default 10s
	ImagePullRetry time.Duration // wait before retrying a pull that failed in transit; doubles; default 2s
}

func (c *Config) defaults() {
	if c.DefaultVCPUs <= 0 {
		c.DefaultVCPUs = 1
	}
	if c.MaxMemoryMiB <= 0 {
		c.MaxMemoryMiB = 16384
	}
	if c.MaxVCPUs <= 0 {
		c.MaxVCPUs = 16
	}
	if c.PlacementWait <= 0 {
		c.PlacementWait = 10 * time.Second
	}
	if c.ImagePullRetry <= 0 {
		c.ImagePullRetry = 2 * time.Second
	}
}

// Materializer turns image references into chunked root filesystems
// (image.Materializer does).
type Materializer interface {
	Resolve(ctx context.Context, ref string, auth oci.Credentials) (oci.Resolved, error)
	Materialize(ctx context.Context, req image.Request) (image.Result, error)
}

// Sealer seals registry credentials at rest (secret.Sealer does);
// associated data binds a ciphertext to its row.
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Registries judges a registry host before an image is enabled from it,
// without resolving it (a *netpolicy.Guard does; the materializer's dialer
// judges what names resolve to).
type Registries interface {
	CheckHost(host string, port uint16) error
}

// Placer picks a host for a capture (the coordinator does).
type Placer interface {
	PlaceWithin(ctx context.Context, spec domain.SessionSpec, need scheduler.Need, wait time.Duration) (domain.HostID, error)
}

// Store is what image jobs read and write of the store: images, their
// jobs and registry credentials, the hosts that capture, and the change
// feed that wakes runners.
type Store interface {
	store.Images
	store.Credentials
	GetHost(ctx context.Context, id domain.HostID) (domain.Host, error)
	ListHosts(ctx context.Context) ([]domain.Host, error)
	Notify(ctx context.Context, topic string) error
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// Deps are what image jobs need.
type Deps struct {
	Store Store
	Hosts hostlink.Transports // captures go to hosts over their link
	Place Placer
	// Images materializes enabled images; nil: jobs fail, saying the
	// server has no blob store.
	Images Materializer
	// Secrets seals registry credentials; nil: enabling with credentials
	// is refused.
	Secrets Sealer
	// Registries refuses registries on private and loopback addresses
	// the operator did not allow; nil: a netpolicy.Guard allowing none.
	Registries Registries
	Logger     *slog.Logger
	Now        func() time.Time // default time.Now
	NewID      func() string    // default UUIDv7
}

// Images enables OCI images into base snapshots: it validates enable
// requests, runs their jobs (Run) and answers what sessions need of them.
type Images struct {
	cfg     Config
	st      Store
	links   *hostlink.Client
	place   Placer
	images  Materializer
	secrets Sealer
	regs    Registries
	log     *slog.Logger
	now     func() time.Time
	newID   func() string
}

// New returns the image service; Run runs its job loop.
func New(cfg Config, deps Deps) (*Images, error) {
	if deps.Store == nil || deps.Hosts == nil || deps.Place == nil {
		return nil, errors.New("new image jobs: Store, Hosts and Place are required")
	}
	cfg.defaults()
	c := &Images{cfg: cfg, st: deps.Store, links: hostlink.NewClient(deps.Hosts), place: deps.Place,
		images: deps.Images, secrets: deps.Secrets, regs: deps.Registries, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if c.regs == nil {
		c.regs = netpolicy.NewGuard(netpolicy.GuardConfig{})
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.newID == nil {
		c.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return c, nil
}

// Run claims and runs image jobs until ctx ends, then waits for the
// running ones.
func (c *Images) Run(ctx context.Context) error {
	c.jobLoop(ctx)
	return nil
}
