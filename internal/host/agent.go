package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Config is the host agent's configuration.
type Config struct {
	CoordinatorURL    string // base URL; hostlink.PathConnect is appended
	Token             string // host token (Authorization: Bearer)
	Name              string
	DataDir           string        // machines/, epochs/, captures/, cached-snapshots/, lease.json
	HeartbeatInterval time.Duration // until the coordinator names one; 0 = 10s
	// Capacity offered to sessions; zero fields are detected (memory from
	// /proc/meminfo, vCPUs from runtime.NumCPU). MaxSessions 0 = no limit.
	Capacity     hostlink.Capacity
	AgentVersion string
	// Considered lists every backend cmd/ looked at and why it was or was
	// not usable; reported in Facts.Available. Empty = only the one in use.
	Considered []hostlink.BackendFacts
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
	DiskChunks ChunkStore
	// MemoryChunks stores the "memory" role (a *chunk.Store with
	// chunk.MemoryChunkSize, same blob store and cache); nil = DiskChunks.
	MemoryChunks ChunkStore
	// ChunkCache is the per-host chunk cache both stores fill (a
	// *chunk.Cache); heartbeats name the snapshots it holds whole. nil =
	// none reported.
	ChunkCache ChunkCache
}

// ChunkStore is what the agent needs of a chunk store; *chunk.Store
// satisfies it.
type ChunkStore interface {
	PutFile(ctx context.Context, path string) (chunk.Manifest, chunk.PutStats, error)
	PutFileOver(ctx context.Context, path string, parent chunk.Manifest) (chunk.Manifest, chunk.PutStats, error)
	PutReader(ctx context.Context, r io.Reader, size int64) (chunk.Manifest, chunk.PutStats, error)
	Verify(ctx context.Context, m chunk.Manifest) error
	VerifyData(ctx context.Context, m chunk.Manifest) error // fetches every chunk through the cache
	Restore(ctx context.Context, m chunk.Manifest, dst string) error
}

// ChunkCache reports whether the per-host chunk cache holds a chunk;
// *chunk.Cache satisfies it.
type ChunkCache interface {
	Has(hash string) bool
}

// Retry timing of the dial loop.
const (
	retryBase    = 500 * time.Millisecond
	retryMax     = 30 * time.Second
	retryRefused = 2 * time.Minute // version mismatch or token refused
	requestLimit = 30 * time.Second
	maxFailedHBs = 3 // heartbeats failing in a row on a live link: redial

	defaultEpochRetention = 24 * time.Hour
)

// Agent is the host agent.
type Agent struct {
	cfg  Config
	deps Deps
	log  *slog.Logger
	api  http.Handler
	cap  hostlink.Capacity

	mu         sync.Mutex
	machines   map[string]*machine             // by session id
	reserved   map[string]hostlink.MachineSpec // boots in flight
	epochs     map[string]int64                // highest epoch seen, cached
	gen        uint64                          // bumped on every start or adopt
	locks      keyedMutex                      // one per session: epoch check + act
	imageLocks keyedMutex                      // one per root filesystem or image capture
	prefetch   prefetchState                   // base snapshots being fetched (prefetch.go)
	lease      leaseState                      // self-fencing (lease.go)
	needed     map[string]time.Time            // session -> last time owned, run or commanded
	pruned     time.Time                       // last epoch prune pass
	cached     recentSnapshots                 // snapshots whose chunks were cached here
	leaseKick  chan struct{}                   // wakes the lease watcher

	link atomic.Pointer[http.Client] // the registered coordinator link's client; nil while there is none

	watchers sync.WaitGroup
	stop     chan struct{} // closed when Run ends: watchers return
	running  atomic.Bool
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
	if cfg.EpochRetention <= 0 {
		cfg.EpochRetention = defaultEpochRetention
	}
	capacity, err := detectCapacity(cfg.Capacity)
	if err != nil {
		return nil, fmt.Errorf("new host agent: %w", err)
	}
	a := &Agent{
		cfg:      cfg,
		deps:     deps,
		log:      deps.Logger,
		cap:      capacity,
		machines: map[string]*machine{},
		reserved: map[string]hostlink.MachineSpec{},
		epochs:   map[string]int64{},
		needed:   map[string]time.Time{},
		stop:     make(chan struct{}),

		leaseKick: make(chan struct{}, 1),
	}
	a.lease.ctx, a.lease.cancel = context.WithCancelCause(context.Background())
	a.api = a.routes()
	return a, nil
}

// Run recovers machines, then keeps a link to the coordinator until ctx
// ends. Machines keep running after Run returns: a restarted agent
// recovers them. Run joins its goroutines.
func (a *Agent) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return errors.New("run host agent: already run")
	}
	defer func() {
		close(a.stop)
		a.watchers.Wait()
	}()
	a.loadLease()
	a.loadCachedSnapshots()
	if err := a.recoverMachines(ctx); err != nil {
		return err
	}
	a.clearCaptures(ctx)
	a.pruneShared()
	leaseCtx, stopLease := context.WithCancel(ctx)
	a.watchers.Add(1)
	go func() {
		defer a.watchers.Done()
		a.watchLease(leaseCtx)
	}()
	defer stopLease()
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

func (a *Agent) retryDelay(err error, failures int) time.Duration {
	if errors.Is(err, hostlink.ErrVersionMismatch) || errors.Is(err, hostlink.ErrUnauthorized) {
		return retryRefused/2 + rand.N(retryRefused/2)
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
		level, msg = slog.LevelError, "coordinator refused this host's token; retrying slowly"
	}
	if err.Error() == last {
		level = slog.LevelDebug
	}
	a.log.Log(context.Background(), level, msg, "error", err, "attempt", failures, "retry_in", wait.Round(time.Millisecond))
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

	gen := a.generation()
	var reg hostlink.RegisterResponse
	sent := a.deps.Now()
	if err := a.post(ctx, client, hostlink.PathRegister, a.registerRequest(), &reg); err != nil {
		return fmt.Errorf("register with coordinator: %w", err)
	}
	connected := a.deps.Now()
	log.Info("registered with coordinator", "owned", len(reg.Owned), "machines", a.machineCount(), "lease", reg.Lease)
	a.renewLease(sent, reg.Lease)
	a.reconcile(ctx, reg.Owned, gen)
	a.link.Store(client)
	defer a.link.CompareAndSwap(client, nil)

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
		gen := a.generation()
		var hb hostlink.HeartbeatResponse
		sent := a.deps.Now()
		if err := a.post(ctx, client, hostlink.PathHeartbeat, a.heartbeatRequest(), &hb); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			failed++
			log.Warn("heartbeat failed", "error", err, "failed_in_a_row", failed)
			if failed >= maxFailedHBs {
				return fmt.Errorf("heartbeat: %d failures in a row, redialing: %w", failed, err)
			}
			continue
		}
		failed = 0
		a.renewLease(sent, hb.Lease)
		a.reconcile(ctx, hb.Owned, gen)
		a.startPrefetch(ctx, hb.Prefetch)
	}
}

func (a *Agent) post(ctx context.Context, client *http.Client, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, requestLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://coordinator"+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build %s: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("post %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("read %s answer: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		pe := &postError{path: path, status: resp.Status, code: resp.StatusCode}
		var eb hostlink.ErrorBody
		if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
			pe.msg = eb.Error
		}
		return pe
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode %s answer: %w", path, err)
	}
	return nil
}

// postError is a coordinator's refusal of a post, with its HTTP status.
type postError struct {
	path, status, msg string
	code              int
}

func (e *postError) Error() string {
	if e.msg == "" {
		return fmt.Sprintf("post %s: %s", e.path, e.status)
	}
	return fmt.Sprintf("post %s: %s: %s", e.path, e.status, e.msg)
}

func (a *Agent) registerRequest() hostlink.RegisterRequest {
	capacity, machines := a.snapshotState()
	return hostlink.RegisterRequest{
		Name:      a.cfg.Name,
		Facts:     a.facts(),
		Capacity:  capacity,
		Machines:  machines,
		Snapshots: a.cachedSnapshots(),
	}
}

func (a *Agent) heartbeatRequest() hostlink.HeartbeatRequest {
	capacity, machines := a.snapshotState()
	return hostlink.HeartbeatRequest{Capacity: capacity, Machines: machines, Snapshots: a.cachedSnapshots()}
}

func (a *Agent) generation() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.gen
}

func (a *Agent) machineCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.machines)
}
