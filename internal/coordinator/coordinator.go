package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/store"
)

// Config tunes a coordinator replica.
type Config struct {
	ReplicaID         string        // unique per replica; names op claims and host routes
	ReplicaAddr       string        // internal URL peers use to reach this replica
	HeartbeatInterval time.Duration // what hosts are told; default 2s
	HostLostAfter     time.Duration // no heartbeat for this long → host lost; default 15s
	MonitorInterval   time.Duration // how often heartbeats are checked; default HostLostAfter/5
	OpLease           time.Duration // a claimed op is reclaimable after this; default 30s
	PlacementWait     time.Duration // how long a create keeps looking for a host; default 10s
	ResumeWait        time.Duration // how long a request waits for an Idle session to resume; default 3m
	IdleTimeout       time.Duration // default idle time before a session is suspended; default 10m
	MaxLifetime       time.Duration // default hard time limit of a session; 0 = none
	Workers           int           // op workers per replica; default 4
	DefaultMemoryMiB  int           // default 256
	DefaultVCPUs      int           // default 1
	MaxMemoryMiB      int           // largest session allowed; default 16384
	MaxVCPUs          int           // default 16
	ImagePullRetry    time.Duration // wait before retrying an image pull that failed in transit; doubles; default 2s
	// GatewayHeaderTimeout bounds how long the model gateway waits for an
	// upstream answer's headers (a stream then runs as long as it flows);
	// default 10m.
	GatewayHeaderTimeout time.Duration
	// HarnessWorkDir holds the trees of harness builds and uploads while
	// they are packed, each in a private directory; only this user (or
	// root) may be able to change it. Default: directly in $TMPDIR.
	HarnessWorkDir string
}

func (c *Config) defaults() error {
	if c.ReplicaID == "" {
		return errors.New("coordinator config: ReplicaID is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatInterval, 2*time.Second)
	def(&c.HostLostAfter, 15*time.Second)
	def(&c.MonitorInterval, c.HostLostAfter/5)
	def(&c.OpLease, 30*time.Second)
	def(&c.PlacementWait, 10*time.Second)
	def(&c.ResumeWait, 3*time.Minute)
	def(&c.IdleTimeout, 10*time.Minute)
	def(&c.ImagePullRetry, 2*time.Second)
	defInt := func(d *int, v int) {
		if *d <= 0 {
			*d = v
		}
	}
	defInt(&c.Workers, 4)
	defInt(&c.DefaultMemoryMiB, 256)
	defInt(&c.DefaultVCPUs, 1)
	defInt(&c.MaxMemoryMiB, 16384)
	defInt(&c.MaxVCPUs, 16)
	if c.HostLostAfter <= c.HeartbeatInterval {
		return fmt.Errorf("coordinator config: HostLostAfter (%s) must exceed HeartbeatInterval (%s)", c.HostLostAfter, c.HeartbeatInterval)
	}
	return nil
}

// HostTransports reaches a host wherever its link is held (this replica or
// a peer). hostlink.Router implements it.
type HostTransports interface {
	Transport(ctx context.Context, hostID domain.HostID) (http.RoundTripper, error)
}

// Sealer seals secrets at rest (secret.Sealer does); associated data binds
// a ciphertext to its row.
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Materializer turns image references into chunked root filesystems
// (image.Materializer does).
type Materializer interface {
	Resolve(ctx context.Context, ref string, auth oci.Credentials) (oci.Resolved, error)
	Materialize(ctx context.Context, req image.Request) (image.Result, error)
}

// Deps are the coordinator's collaborators.
type Deps struct {
	Store  store.Store
	Hosts  HostTransports
	Logger *slog.Logger
	// Images materializes enabled images; nil: image enable jobs fail,
	// saying the server has no blob store.
	Images Materializer
	// Secrets seals registry credentials; nil: enabling with credentials
	// is refused.
	Secrets Sealer
	// GatewayTransport carries the model gateway's requests upstream; nil:
	// a clone of http.DefaultTransport (TLS verified with the system roots).
	// Tests give one trusting their server's certificate.
	GatewayTransport http.RoundTripper
	// HarnessBuilder builds harness bundles and HarnessChunks stores their
	// chunks; either nil: harness build and add are refused, saying the
	// server has no blob store.
	HarnessBuilder HarnessBuilder
	HarnessChunks  ChunkPutter
	Now            func() time.Time // default time.Now
	NewID          func() string    // default UUIDv7
}

// Coordinator is one replica's lifecycle engine.
type Coordinator struct {
	cfg   Config
	st    store.Store
	hosts HostTransports
	log   *slog.Logger
	now   func() time.Time
	newID func() string

	images     Materializer
	secrets    Sealer
	gateway    gatewayState     // model gateway key and upstream (gateway.go)
	harnessReg *harnessRegistry // harness builds (harness_registry.go)

	// bg is cancelled when Run returns; background task work (setup,
	// suspending a stopped task) runs under it and Run joins it.
	bg       context.Context
	bgCancel context.CancelFunc
	tasksWG  sync.WaitGroup
}

// New checks cfg and returns a coordinator; call Run to start its loops.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Hosts == nil {
		return nil, errors.New("coordinator: Store and Hosts are required")
	}
	c := &Coordinator{cfg: cfg, st: deps.Store, hosts: deps.Hosts, log: deps.Logger, now: deps.Now, newID: deps.NewID,
		images: deps.Images, secrets: deps.Secrets, gateway: gatewayState{upstream: deps.GatewayTransport},
		harnessReg: newHarnessRegistry(deps.HarnessBuilder, deps.HarnessChunks, cfg.HarnessWorkDir)}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("replica_id", cfg.ReplicaID)
	c.bg, c.bgCancel = context.WithCancel(context.Background())
	if c.now == nil {
		c.now = time.Now
	}
	if c.newID == nil {
		c.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return c, nil
}

// Config returns the effective configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// Run runs the op workers and the heartbeat monitor until ctx ends, then
// waits for them.
func (c *Coordinator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range c.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.workLoop(ctx, i)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		c.monitorLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		c.imageJobLoop(ctx)
	}()
	wg.Wait()
	c.bgCancel()
	c.tasksWG.Wait()
	return nil
}

// runCtx is the context of background task work: cancelled when Run returns.
func (c *Coordinator) runCtx() context.Context { return c.bg }
