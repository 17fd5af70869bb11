package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
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
	PlacementWait     time.Duration // how long a create or resume keeps looking for a host that can run it; default 10s
	ResumeWait        time.Duration // how long a request waits for an Idle session to resume; default 3m
	IdleTimeout       time.Duration // default idle time before a session is suspended; default 10m
	MaxLifetime       time.Duration // default hard time limit of a session; 0 = none
	Workers           int           // op workers per replica; default 4
	DefaultMemoryMiB  int           // default 256
	DefaultVCPUs      int           // default 1
	MaxMemoryMiB      int           // largest session allowed; default 16384
	MaxVCPUs          int           // default 16
	// QueueWait is how long a create or resume that some host could run
	// waits in the queue for room (idle sessions being evicted) before it
	// is refused with domain.ErrNoRoom; default 1m.
	QueueWait time.Duration
	// EvictIdleAfter is the eviction floor of hosts that report none: when
	// every host is full, an Active session idle this long may be suspended
	// to make room; default 1m; negative: never.
	EvictIdleAfter time.Duration
	// LinkRecheck is how often a replica re-checks that the host links it
	// holds are still allowed (besides every TopicHosts wake-up); default 2s.
	LinkRecheck time.Duration
}

// Lease is how long a host keeps its machines running without a
// successful heartbeat: 2/3 of HostLostAfter (its default if unset), so a
// cut-off host has paused its machines before any replica may declare it
// lost and move its sessions.
func (c Config) Lease() time.Duration {
	lost := c.HostLostAfter
	if lost <= 0 {
		lost = defaultHostLostAfter
	}
	return lost * 2 / 3
}

// defaultHeartbeat is how often hosts heartbeat unless configured.
const defaultHeartbeat = 2 * time.Second

const defaultHostLostAfter = 15 * time.Second

func (c *Config) defaults() error {
	if c.ReplicaID == "" {
		return errors.New("coordinator config: ReplicaID is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.HeartbeatInterval, defaultHeartbeat)
	def(&c.HostLostAfter, defaultHostLostAfter)
	def(&c.LinkRecheck, 2*time.Second)
	def(&c.MonitorInterval, c.HostLostAfter/5)
	def(&c.OpLease, 30*time.Second)
	def(&c.PlacementWait, 10*time.Second)
	def(&c.QueueWait, time.Minute)
	if c.EvictIdleAfter == 0 {
		c.EvictIdleAfter = time.Minute
	}
	def(&c.ResumeWait, 3*time.Minute)
	def(&c.IdleTimeout, 10*time.Minute)
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

// Images is what sessions need of enabled images (package imagejobs).
type Images interface {
	// PinImage resolves spec.Image to a ready image and fills in what its
	// sessions run with; it returns the image's C library ("" without an
	// image). Refusals wrap domain.ErrInvalid.
	PinImage(ctx context.Context, spec *domain.SessionSpec) (libc string, err error)
	// Base returns the image a session was created from with the base
	// snapshot pinned then; one refreshed or disabled since wraps
	// domain.ErrConflict (or domain.ErrNotFound): the session cannot start.
	Base(ctx context.Context, spec domain.SessionSpec) (domain.Image, error)
	// PrefetchFor lists the base snapshots host could restore and does not
	// cache yet (heartbeat answers).
	PrefetchFor(ctx context.Context, host domain.HostID, cached []string) []hostlink.Prefetch
}

// Harnesses is what sessions need of registered harness bundles (package
// harnessreg).
type Harnesses interface {
	// PinHarness resolves spec.Harness to a registered bundle that can run
	// on a root filesystem with libc; refusals wrap domain.ErrInvalid.
	PinHarness(ctx context.Context, spec *domain.SessionSpec, libc string) error
	// Bundle returns the bundle a session was created with.
	Bundle(ctx context.Context, spec domain.SessionSpec) (domain.Harness, error)
}

// ChunkRoots name chunks GC must keep besides the sessions' snapshots
// (image bases, harness bundles).
type ChunkRoots interface {
	MarkLive(ctx context.Context, live map[string]bool) error
}

// RestoreObserver learns that a session resumes from its head snapshot
// after its previous incarnation was lost (tasks rewind their event cursor
// to what that snapshot had). An error makes the resume retry.
type RestoreObserver interface {
	SessionRestored(ctx context.Context, s domain.Session, head domain.Snapshot) error
}

// Metrics is what the coordinator measures (a *metrics.Registry): each op
// finished by kind and outcome ("succeeded", "failed", "fenced",
// "retried"), the bytes each committed snapshot uploaded, and placement
// under pressure: ops (create, resume) that had to queue for room, those
// refused when none came, and sessions evicted to make room.
type Metrics interface {
	OpFinished(kind, outcome string, d time.Duration)
	SnapshotUploaded(bytes int64)
	PlacementQueued(kind string)
	PlacementRefused(kind string)
	SessionEvicted()
}

// noMetrics records nothing.
type noMetrics struct{}

func (noMetrics) OpFinished(string, string, time.Duration) {}
func (noMetrics) SnapshotUploaded(int64)                   {}
func (noMetrics) PlacementQueued(string)                   {}
func (noMetrics) PlacementRefused(string)                  {}
func (noMetrics) SessionEvicted()                          {}

// Store is what the coordinator reads and writes of the store: the fleet
// and its keys, sessions with their ops, events, snapshots and outboxes,
// and the change feed. Nothing an organisation curates.
type Store interface {
	store.Hosts
	store.Sessions
	store.Ops
	store.Events
	store.Snapshots
	store.Outbox
	store.Tokens
	Notify(ctx context.Context, topic string) error
	Subscribe(ctx context.Context, topic string) <-chan struct{}
}

// Deps are the coordinator's collaborators.
type Deps struct {
	Store Store
	Hosts hostlink.Transports
	// Links admits, re-checks and closes this replica's host links (the
	// hostlink Router); nil: links are not checked across replicas nor
	// closed when a host loses its access (tests without a link server).
	Links Links
	// Images and Harnesses resolve what a session spec names; nil: specs
	// naming an image or a harness are refused.
	Images    Images
	Harnesses Harnesses
	// Roots are kept by GC; Restored are told about resumes after loss.
	Roots    []ChunkRoots
	Restored []RestoreObserver
	Metrics  Metrics // nil records nothing
	Logger   *slog.Logger
	Now      func() time.Time // default time.Now
	NewID    func() string    // default UUIDv7
}

// Coordinator is one replica's session control plane.
type Coordinator struct {
	cfg     Config
	st      Store
	hosts   hostlink.Transports
	links   *hostlink.Client
	places  *Placement
	images  Images
	harns   Harnesses
	roots   []ChunkRoots
	restd   []RestoreObserver
	met     Metrics
	access  *Access
	reports *reportLimiter
	log     *slog.Logger
	now     func() time.Time
	newID   func() string
}

// New checks cfg and returns a coordinator; call Run to start its loops.
func New(cfg Config, deps Deps) (*Coordinator, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if deps.Store == nil || deps.Hosts == nil {
		return nil, errors.New("coordinator: Store and Hosts are required")
	}
	c := &Coordinator{cfg: cfg, st: deps.Store, hosts: deps.Hosts, links: hostlink.NewClient(deps.Hosts),
		places: NewPlacement(deps.Store, cfg.HeartbeatInterval, deps.Now),
		images: deps.Images, harns: deps.Harnesses, roots: deps.Roots, restd: deps.Restored, met: deps.Metrics,
		reports: newReportLimiter(), log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if c.met == nil {
		c.met = noMetrics{}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.log = c.log.With("replica_id", cfg.ReplicaID)
	if c.now == nil {
		c.now = time.Now
	}
	if c.newID == nil {
		c.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	c.access = &Access{cfg: cfg, st: deps.Store, ends: deps.Links, log: c.log, clock: c.now, recoverFn: c.recoverHost}
	return c, nil
}

// Access is this replica's host access: link admission and re-checks,
// and taking hosts out of service.
func (c *Coordinator) Access() *Access { return c.access }

// Config returns the effective configuration.
func (c *Coordinator) Config() Config { return c.cfg }

// Run runs the op workers, the heartbeat monitor and the link guard until
// ctx ends, then waits for them.
func (c *Coordinator) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := range c.cfg.Workers {
		wg.Go(func() { c.workLoop(ctx, i) })
	}
	wg.Go(func() { c.monitorLoop(ctx) })
	wg.Go(func() { c.access.guardLinks(ctx) })
	wg.Wait()
	return nil
}
