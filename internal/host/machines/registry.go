package machines

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host/keyed"
	"github.com/engrams/engrams/internal/hostlink"
)

// Config is the registry's configuration.
type Config struct {
	DataDir string // machines/ and epochs/ live under it
	// Capacity is what machines and reservations count against.
	Capacity domain.Capacity
	// EpochRetention: the epoch record of a session this host neither runs
	// nor is told it owns is deleted after this long; 0 = 24h.
	EpochRetention time.Duration
}

// Deps are the registry's collaborators.
type Deps struct {
	Logger *slog.Logger
	Now    func() time.Time
}

const defaultEpochRetention = 24 * time.Hour

// Registry is the table of machines by session, with the capacity
// reserved for boots in flight, the highest epoch seen per session and
// one lock per session (callers take it to check an epoch and act).
type Registry struct {
	cfg   Config
	log   *slog.Logger
	now   func() time.Time
	locks keyed.Mutex

	mu       sync.Mutex
	machines map[string]*Machine             // by session id
	reserved map[string]hostlink.MachineSpec // boots in flight
	gen      uint64                          // bumped on every publish or claim
	epochs   map[string]int64                // highest epoch seen, cached
	needed   map[string]time.Time            // session -> last time owned, run or commanded
	pruned   time.Time                       // last epoch prune pass
	stopped  bool

	stop     chan struct{} // closed when Run ends: exit watchers return
	watchers sync.WaitGroup
}

// New returns an empty registry.
func New(cfg Config, deps Deps) *Registry {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if cfg.EpochRetention <= 0 {
		cfg.EpochRetention = defaultEpochRetention
	}
	return &Registry{
		cfg: cfg, log: deps.Logger, now: deps.Now,
		machines: map[string]*Machine{},
		reserved: map[string]hostlink.MachineSpec{},
		epochs:   map[string]int64{},
		needed:   map[string]time.Time{},
		stop:     make(chan struct{}),
	}
}

// Run watches published machines exit until ctx ends, then joins its
// watchers. Machines keep running: a restarted agent recovers them.
func (r *Registry) Run(ctx context.Context) error {
	<-ctx.Done()
	r.mu.Lock()
	if !r.stopped {
		r.stopped = true
		close(r.stop)
	}
	r.mu.Unlock()
	r.watchers.Wait()
	return nil
}

// Lock takes sid's session lock.
func (r *Registry) Lock(sid string) (unlock func()) { return r.locks.Lock(sid) }

// TryLock takes sid's session lock if it is free.
func (r *Registry) TryLock(sid string) (unlock func(), ok bool) { return r.locks.TryLock(sid) }

// Publish enters mc (from NewMachine) in the table as its session's
// machine, with a new generation, and watches it exit.
func (r *Registry) Publish(mc *Machine) {
	r.mu.Lock()
	r.gen++
	mc.mu.Lock()
	mc.gen = r.gen
	mc.mu.Unlock()
	r.machines[mc.sessionID] = mc
	watch := !r.stopped
	if watch {
		r.watchers.Add(1)
	}
	r.mu.Unlock()
	if watch {
		go r.watchExit(mc)
	}
}

func (r *Registry) watchExit(mc *Machine) {
	defer r.watchers.Done()
	select {
	case <-mc.vm.Done():
		r.mu.Lock()
		if r.machines[mc.sessionID] == mc {
			mc.MarkExited()
		}
		r.mu.Unlock()
		r.log.Info("machine exited", "session_id", mc.sessionID, "epoch", mc.Epoch())
	case <-r.stop:
	}
}

// Get is sid's machine, or nil.
func (r *Registry) Get(sid string) *Machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.machines[sid]
}

// Machines lists every machine in the table.
func (r *Registry) Machines() []*Machine {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*Machine, 0, len(r.machines))
	for _, mc := range r.machines {
		out = append(out, mc)
	}
	return out
}

// Count is how many machines the table holds.
func (r *Registry) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.machines)
}

// Generation is the current generation: machines published or claimed
// later have a higher Gen.
func (r *Registry) Generation() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen
}

// Claim gives mc a new generation: a newer op claims the running machine.
func (r *Registry) Claim(mc *Machine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	mc.mu.Lock()
	mc.gen = r.gen
	mc.mu.Unlock()
}

// Destroy stops sid's machine, forgets it and cleans its dir. It returns
// the machine destroyed, nil if sid had none. Callers hold the session
// lock.
func (r *Registry) Destroy(ctx context.Context, sid, reason string) (*Machine, error) {
	mc := r.Get(sid)
	if mc == nil {
		return nil, nil
	}
	if err := mc.vm.Destroy(ctx); err != nil {
		return nil, fmt.Errorf("destroy machine of session %s: %w", sid, err)
	}
	mc.transport.CloseIdleConnections()
	r.mu.Lock()
	if r.machines[sid] == mc {
		delete(r.machines, sid)
	}
	r.mu.Unlock()
	if err := CleanDir(r.Dir(sid)); err != nil {
		r.log.Warn("machine destroyed, dir left behind", "session_id", sid, "err", err)
	}
	r.log.Info("machine destroyed", "session_id", sid, "epoch", mc.Epoch(), "reason", reason)
	return mc, nil
}

// SetPaused records mc's pause state, also on disk so a restarted agent
// knows which machines it paused.
func (r *Registry) SetPaused(mc *Machine, paused bool) {
	mc.mu.Lock()
	mc.paused = paused
	epoch := mc.epoch
	mc.mu.Unlock()
	if err := r.WriteRecord(mc.sessionID, epoch, mc.spec, paused); err != nil {
		r.log.Warn("record machine pause state", "session_id", mc.sessionID, "err", err)
	}
}

// AdoptEpoch fences mc's session at epoch and, if it is higher than the
// one mc runs, makes it mc's epoch (on disk too). Callers hold the session
// lock.
func (r *Registry) AdoptEpoch(mc *Machine, epoch int64) error {
	if err := r.Fence(mc.sessionID, epoch); err != nil {
		return err
	}
	mc.mu.Lock()
	if epoch <= mc.epoch {
		mc.mu.Unlock()
		return nil
	}
	old := mc.epoch
	mc.epoch = epoch
	paused := mc.paused
	mc.mu.Unlock()
	r.log.Info("machine adopted at a newer epoch", "session_id", mc.sessionID, "epoch", epoch, "was", old)
	return r.WriteRecord(mc.sessionID, epoch, mc.spec, paused)
}

// State is the capacity in use and the machines, for the coordinator.
func (r *Registry) State() (domain.Capacity, []hostlink.MachineStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.cfg.Capacity
	now := r.now()
	ms := make([]hostlink.MachineStatus, 0, len(r.machines))
	for _, mc := range r.machines {
		st := mc.Status(now)
		ms = append(ms, st)
		if st.State != stateExited {
			c.UsedMemoryMiB += mc.spec.MemoryMiB
			c.UsedVCPUs += mc.spec.VCPUs
			c.Sessions++
		}
	}
	slices.SortFunc(ms, func(x, y hostlink.MachineStatus) int { return strings.Compare(x.SessionID, y.SessionID) })
	return c, ms
}

// Reserve claims capacity for a boot in flight under key (a session id,
// or an image capture's name). Callers hold key's lock.
func (r *Registry) Reserve(key string, spec hostlink.MachineSpec) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	mem, cpus, n := spec.MemoryMiB, spec.VCPUs, 1
	for _, mc := range r.machines {
		if _, exited, _ := mc.State(); !exited {
			mem, cpus, n = mem+mc.spec.MemoryMiB, cpus+mc.spec.VCPUs, n+1
		}
	}
	for _, s := range r.reserved {
		mem, cpus, n = mem+s.MemoryMiB, cpus+s.VCPUs, n+1
	}
	c := r.cfg.Capacity
	switch {
	case mem > c.MemoryMiB:
		return fmt.Errorf("session %s needs %d MiB: %d MiB of %d in use or reserved", key, spec.MemoryMiB, mem-spec.MemoryMiB, c.MemoryMiB)
	case cpus > c.VCPUs*domain.VCPUOvercommit: // the scheduler's rule
		return fmt.Errorf("session %s needs %d vCPUs: %d of %d (%d CPUs × %d) in use or reserved",
			key, spec.VCPUs, cpus-spec.VCPUs, c.VCPUs*domain.VCPUOvercommit, c.VCPUs, domain.VCPUOvercommit)
	case c.MaxSessions > 0 && n > c.MaxSessions:
		return fmt.Errorf("session %s: this host runs at most %d sessions", key, c.MaxSessions)
	}
	r.reserved[key] = spec
	return nil
}

// Unreserve releases key's reservation.
func (r *Registry) Unreserve(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reserved, key)
}
