package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/relay"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/vmm"
)

// Config is the host agent's configuration.
type Config struct {
	CoordinatorURL    string // base URL; hostlink.PathConnect is appended
	Token             string // host token (Authorization: Bearer)
	Name              string
	DataDir           string        // agent.lock, machines/, epochs/, captures/, cached-snapshots/, lease.json
	HeartbeatInterval time.Duration // until the coordinator names one; 0 = 10s
	// Capacity offered to sessions; zero fields are detected (memory from
	// /proc/meminfo, vCPUs from runtime.NumCPU). MaxSessions 0 = no limit.
	Capacity     domain.Capacity
	AgentVersion string
	// Considered lists every backend cmd/ looked at and why it was or was
	// not usable; reported in Facts.Available. Empty = only the one in use.
	Considered []domain.BackendFacts
	// EpochRetention: the epoch record of a session this host neither runs
	// nor is told it owns is deleted after this long; 0 = 24h.
	EpochRetention time.Duration
}

// Deps are the agent's collaborators.
type Deps struct {
	Backend vmm.Backend
	Logger  *slog.Logger
	Now     func() time.Time
	// HTTPClient performs the WebSocket handshake with the coordinator (TLS
	// roots, proxies, in-memory tests); nil = http.DefaultClient.
	HTTPClient *http.Client
	// DiskChunks stores snapshot files in the blob store: disk, device
	// state and every role but memory (a *chunk.Store with
	// chunk.DiskChunkSize). nil: snapshot and restore answer "unsupported".
	DiskChunks snapshots.ChunkStore
	// MemoryChunks stores the "memory" role (a *chunk.Store with
	// chunk.MemoryChunkSize, same blob store and cache); nil = DiskChunks.
	MemoryChunks snapshots.ChunkStore
	// ChunkCache is the per-host chunk cache both stores fill (a
	// *chunk.Cache); heartbeats name the snapshots it holds whole. nil =
	// none reported.
	ChunkCache snapshots.ChunkCache
	// Metrics is the process's registry, for the agent's parts that
	// count what they refuse (the relay's guest bounds); nil records
	// nothing.
	Metrics *metrics.Registry
	// Checkpoint, when set, is called at named points of create, resume
	// and suspend, so fault tests can stop the agent exactly there
	// (cmd/engrams arms it from ENGRAMS_TEST_PAUSE_FILE): "boot-recorded"
	// (the machine record written, no VMM yet), "boot-ready" and
	// "restore-ready" (the machine answers, the start is not answered
	// yet), "snapshot-written" (the capture's files complete on local
	// disk), "snapshot-uploading" (its first file uploaded),
	// "snapshot-uploaded" (every chunk stored, the machine not destroyed
	// yet) and "snapshot-destroyed" (its answer kept, not sent yet). The
	// backend may have points of its own. nil: none.
	Checkpoint func(ctx context.Context, point string)
	// Pager serves restored memory lazily (a mounted *pager.Pager) where
	// the backend maps memory in place; nil rebuilds it whole first.
	Pager snapshots.Pager
	// DataDirLock is the caller's hold on DataDir (LockDataDir), taken
	// before it opened what lives there (the chunk cache cleans its
	// directory, a backend its own); nil: Run takes it.
	DataDirLock *DataDirLock
	// Network, when set, makes the network path of each boot and restore
	// (see NetworkFunc); the backend must have Capabilities.Network. nil:
	// no machine gets one (its guest reaches nothing). Not yet wired by
	// cmd: it needs the session's egress policy in hostlink.MachineSpec
	// and the egress proxy and resolver. A machine recovered after an agent
	// restart keeps its TAP but loses what listened behind it.
	Network NetworkFunc
}

// agentLock is the data dir's lock file, held while Run runs.
const agentLock = "agent.lock"

// DataDirLock is one agent's hold on its data dir.
type DataDirLock struct{ f *os.File }

// LockDataDir takes dir for one agent: a second one would adopt the first
// one's machines and pause them when its own link fails to come up. It
// fails with hostfs.ErrInUse while another process holds dir.
func LockDataDir(dir string) (*DataDirLock, error) {
	f, err := hostfs.LockDir(dir, agentLock)
	if err != nil {
		return nil, fmt.Errorf("data dir %w; stop the other host agent (engrams host run or engrams dev) first", err)
	}
	return &DataDirLock{f: f}, nil
}

// Close lets dir go.
func (l *DataDirLock) Close() error { return l.f.Close() }

// Retry timing of the dial loop.
const (
	retryBase    = 500 * time.Millisecond
	retryMax     = 30 * time.Second
	retryRefused = 2 * time.Minute // version mismatch or token refused
	retryHeld    = 2 * time.Second // another link holds the host: first wait, doubled up to retryRefused
	maxFailedHBs = 3               // heartbeats failing in a row on a live link: redial
)

// Agent is the host agent: the coordinator link and its heartbeats, over
// the machine registry, the lifecycle, the snapshot parts and the
// per-machine helpers it wires together.
type Agent struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	api  http.Handler

	link  *coordLink
	lease *lease
	reg   *machines.Registry
	snaps *snapshots.Snapshots
	relay *relay.Relay
	life  *lifecycle

	running atomic.Bool
}

// New returns an agent; Run starts it.
func New(cfg Config, deps Deps) (*Agent, error) {
	switch {
	case cfg.CoordinatorURL == "":
		return nil, errors.New("new host agent: coordinator url is required")
	case cfg.Token == "":
		return nil, errors.New("new host agent: token is required")
	case cfg.DataDir == "":
		return nil, errors.New("new host agent: data dir is required")
	case deps.Backend == nil:
		return nil, errors.New("new host agent: backend is required")
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 10 * time.Second
	}
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
	capacity, err := detectCapacity(cfg.Capacity)
	if err != nil {
		return nil, fmt.Errorf("new host agent: %w", err)
	}
	a := &Agent{cfg: cfg, deps: deps, log: deps.Logger, link: &coordLink{}}
	a.reg = machines.New(machines.Config{DataDir: cfg.DataDir, Capacity: capacity, EpochRetention: cfg.EpochRetention},
		machines.Deps{Logger: deps.Logger, Now: deps.Now})
	a.lease = newLease(cfg.DataDir, deps.Logger, deps.Now, a.reg.Count)
	facts := func() domain.HostFacts { return hostFacts(cfg, deps.Backend) }
	a.snaps = snapshots.New(snapshots.Config{DataDir: cfg.DataDir}, snapshots.Deps{
		Backend: deps.Backend, DiskChunks: deps.DiskChunks, MemoryChunks: deps.MemoryChunks, ChunkCache: deps.ChunkCache,
		Logger: deps.Logger, Now: deps.Now, Facts: facts, Capacity: a.reg, Lease: a.lease, Checkpoint: deps.Checkpoint,
		Pager: deps.Pager,
	})
	a.relay = relay.New(relay.Deps{Logger: deps.Logger, Link: a.link, Epochs: a.reg, Metrics: deps.Metrics})
	a.life = &lifecycle{log: deps.Logger, now: deps.Now, backend: deps.Backend, facts: facts,
		reg: a.reg, snaps: a.snaps, lease: a.lease, hooks: a.relay, checkpoint: deps.Checkpoint,
		network: deps.Network, dialBroker: func(ctx context.Context, sid, hostPort string) (net.Conn, error) {
			return a.link.dialBroker(ctx, a.reg, sid, hostPort)
		}}
	a.api = (&api{log: deps.Logger, reg: a.reg, life: a.life, snaps: a.snaps, bounds: a.relay}).routes()
	return a, nil
}

// Run recovers machines, then keeps a link to the coordinator until ctx
// ends. Machines keep running after Run returns: a restarted agent
// recovers them. Run joins its goroutines.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("run host agent: already run")
	}
	if a.deps.DataDirLock == nil {
		lock, err := LockDataDir(a.cfg.DataDir)
		if err != nil {
			return fmt.Errorf("run host agent: %w", err)
		}
		defer lock.Close()
	}
	// The registry's exit watchers and the per-machine helpers run until
	// Run returns; the lease watcher and prefetch end with ctx.
	partsCtx, stopParts := context.WithCancel(context.WithoutCancel(ctx))
	var parts sync.WaitGroup
	defer func() {
		stopParts()
		parts.Wait()
	}()
	parts.Go(func() { _ = a.reg.Run(partsCtx) })
	parts.Go(func() { _ = a.relay.Run(partsCtx) })
	a.lease.load()
	a.snaps.LoadCached()
	if err := a.life.recoverMachines(ctx); err != nil {
		return err
	}
	a.snaps.ClearCaptures(ctx)
	a.snaps.PruneShared(a.reg.Dirs())
	leaseCtx, stopLease := context.WithCancel(ctx)
	defer stopLease()
	parts.Go(func() { _ = a.lease.run(leaseCtx, a.life.pauseAll) })
	parts.Go(func() { _ = a.snaps.Run(ctx) })
	var (
		failures int
		lastErr  string
	)
	for ctx.Err() == nil {
		err := a.connectOnce(ctx)
		if ctx.Err() != nil {
			break
		}
		var wait time.Duration
		if err == nil { // a registered link dropped: redial soon
			failures, lastErr = 0, ""
			wait = retryBase/2 + rand.N(retryBase/2)
		} else {
			failures++
			wait = a.retryDelay(err, failures)
			a.logFailure(err, lastErr, failures, wait)
			lastErr = err.Error()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return nil
}

// Ready reports whether the agent holds a registered link to the
// coordinator: without one it is told of no new work (its /readyz).
func (a *Agent) Ready(context.Context) error {
	if a.link.Client() == nil {
		return errors.New("no registered link to the coordinator")
	}
	return nil
}

func (a *Agent) retryDelay(err error, failures int) time.Duration {
	if errors.Is(err, hostlink.ErrVersionMismatch) || errors.Is(err, hostlink.ErrUnauthorized) {
		return retryRefused/2 + rand.N(retryRefused/2)
	}
	if errors.Is(err, hostlink.ErrAlreadyConnected) {
		// Another agent's link holds the host: wait at least as long as
		// the coordinator says that link has left, and longer each time.
		d := retryRefused
		if failures < 8 {
			d = min(retryHeld<<(failures-1), retryRefused)
		}
		return max(hostlink.RetryAfter(err), d/2+rand.N(d/2+1))
	}
	d := retryMax
	if failures < 16 {
		d = min(retryBase<<(failures-1), retryMax)
	}
	return d/2 + rand.N(d/2+1)
}

// logFailure logs a failure with its reason once; repeats of the same
// reason go to debug.
func (a *Agent) logFailure(err error, last string, failures int, wait time.Duration) {
	level := slog.LevelWarn
	msg := "coordinator link failed"
	switch {
	case errors.Is(err, hostlink.ErrVersionMismatch):
		level, msg = slog.LevelError, "coordinator refused this host's protocol version; retrying slowly until one side is upgraded"
	case errors.Is(err, hostlink.ErrUnauthorized):
		level, msg = slog.LevelError, "coordinator refused this host (its token is unknown or revoked, or the host is disabled or deleted); retrying slowly"
	case errors.Is(err, hostlink.ErrAlreadyConnected):
		level, msg = slog.LevelError, "coordinator refused this link: another agent with this host's token holds the host; stop one of them. Retrying slowly"
	}
	if err.Error() == last {
		level = slog.LevelDebug
	}
	a.log.Log(context.Background(), level, msg, "err", err, "attempt", failures, "retry_in", wait.Round(time.Millisecond))
}

// connectOnce dials, registers and heartbeats until the link drops. It
// returns nil when a registered link ended, the failure otherwise.
func (a *Agent) connectOnce(ctx context.Context) error {
	conn, err := hostlink.Dial(ctx, hostlink.DialConfig{
		URL:        a.cfg.CoordinatorURL,
		Token:      a.cfg.Token,
		Handler:    a.api,
		Logger:     a.log,
		HTTPClient: a.deps.HTTPClient,
	})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	log := a.log.With("host_id", conn.HostID())
	client := conn.HTTPClient()

	gen := a.reg.Generation()
	var reg hostlink.RegisterResponse
	sent := a.deps.Now()
	if err := a.link.Post(ctx, client, hostlink.PathRegister, a.registerRequest(), &reg); err != nil {
		return fmt.Errorf("register with coordinator: %w", err)
	}
	connected := a.deps.Now()
	log.Info("registered with coordinator", "owned", len(reg.Owned), "machines", a.reg.Count(), "lease", reg.Lease)
	a.lease.renew(sent, reg.Lease)
	a.life.reconcile(ctx, reg.Owned, gen)
	a.link.set(conn)
	defer a.link.clear(conn)

	interval := a.cfg.HeartbeatInterval
	if reg.HeartbeatInterval > 0 {
		interval = reg.HeartbeatInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	failed := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-conn.Done():
			log.Warn("coordinator link lost", "connected_for", a.deps.Now().Sub(connected).Round(time.Second))
			return nil
		case <-tick.C:
		}
		gen := a.reg.Generation()
		var hb hostlink.HeartbeatResponse
		sent := a.deps.Now()
		if err := a.link.Post(ctx, client, hostlink.PathHeartbeat, a.heartbeatRequest(), &hb); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, hostlink.ErrUnauthorized) || errors.Is(err, hostlink.ErrAlreadyConnected) {
				return fmt.Errorf("heartbeat refused, link closed: %w", err)
			}
			failed++
			log.Warn("heartbeat failed", "err", err, "failed_in_a_row", failed)
			if failed >= maxFailedHBs {
				return fmt.Errorf("heartbeat: %d failures in a row, redialing: %w", failed, err)
			}
			continue
		}
		failed = 0
		a.lease.renew(sent, hb.Lease)
		a.life.reconcile(ctx, hb.Owned, gen)
		a.snaps.Prefetch(hb.Prefetch)
	}
}

func (a *Agent) registerRequest() hostlink.RegisterRequest {
	capacity, machines := a.reg.State()
	return hostlink.RegisterRequest{
		Name:      a.cfg.Name,
		Facts:     hostFacts(a.cfg, a.deps.Backend),
		Capacity:  capacity,
		Machines:  machines,
		Snapshots: a.snaps.Cached(),
	}
}

func (a *Agent) heartbeatRequest() hostlink.HeartbeatRequest {
	capacity, machines := a.reg.State()
	return hostlink.HeartbeatRequest{Capacity: capacity, Machines: machines, Snapshots: a.snaps.Cached()}
}
