package machines

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Machine states reported to the coordinator.
const (
	stateRunning = "running"
	statePaused  = "paused"
	stateExited  = "exited"
)

// Machine is one session's running (or exited) machine.
type Machine struct {
	sessionID string
	spec      hostlink.MachineSpec
	vm        vmm.Machine
	transport *http.Transport // to the guest daemon
	now       func() time.Time

	mu           sync.Mutex
	epoch        int64
	gen          uint64 // registry generation when published or claimed
	exited       bool
	paused       bool           // paused for the lease, or a resume after a snapshot failed
	holdUntil    time.Time      // kept paused until then: a complete local capture waits for its retried command
	memParent    chunk.Manifest // memory of the snapshot restored or last taken: the next one stores deltas over it
	lastActivity time.Time      // last guest request through this host ended
	inflight     int            // guest requests in flight
}

// NewMachine describes vm, sid's machine at epoch; Registry.Publish
// enters it in the table. now stamps its activity (nil: time.Now).
func NewMachine(sid string, epoch int64, spec hostlink.MachineSpec, vm vmm.Machine, now func() time.Time) *Machine {
	if now == nil {
		now = time.Now
	}
	mc := &Machine{sessionID: sid, epoch: epoch, spec: spec, vm: vm, now: now, lastActivity: now()}
	mc.transport = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			c, err := vm.Dial(ctx)
			if err != nil {
				return nil, fmt.Errorf("dial guest of session %s: %w", sid, err)
			}
			return c, nil
		},
		DisableCompression:     true,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: guestapi.MaxHeaderBytes, // the guest is hostile
	}
	return mc
}

// SessionID is the session the machine runs.
func (mc *Machine) SessionID() string { return mc.sessionID }

// Spec is what the machine was started with.
func (mc *Machine) Spec() hostlink.MachineSpec { return mc.spec }

// VM is the backend's machine.
func (mc *Machine) VM() vmm.Machine { return mc.vm }

// Transport reaches the guest daemon.
func (mc *Machine) Transport() *http.Transport { return mc.transport }

// Epoch is the epoch the machine runs at.
func (mc *Machine) Epoch() int64 {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.epoch
}

// State reads the epoch and the exited and paused flags at once.
func (mc *Machine) State() (epoch int64, exited, paused bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.epoch, mc.exited, mc.paused
}

// Gen is the registry generation when the machine was published or last
// claimed at a newer epoch.
func (mc *Machine) Gen() uint64 {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.gen
}

// MarkExited reports the machine exited (until it is destroyed).
func (mc *Machine) MarkExited() {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.exited = true
}

// MarkPaused sets the paused flag in memory only (Registry.SetPaused
// records it too).
func (mc *Machine) MarkPaused(paused bool) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.paused = paused
}

// Hold keeps a paused machine paused until t (zero: no hold): its
// complete local capture waits for the coordinator's retried command.
func (mc *Machine) Hold(t time.Time) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.holdUntil = t
}

// Held reports whether the machine is held paused at now.
func (mc *Machine) Held(now time.Time) bool {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return now.Before(mc.holdUntil)
}

// MemParent is the memory manifest the next snapshot stores deltas over.
func (mc *Machine) MemParent() chunk.Manifest {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	return mc.memParent
}

// SetMemParent records the memory of the snapshot restored or just taken.
func (mc *Machine) SetMemParent(m chunk.Manifest) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	mc.memParent = m
}

// Active marks a guest request in flight; call the result when it ends.
func (mc *Machine) Active() (done func()) {
	mc.mu.Lock()
	mc.inflight++
	mc.lastActivity = mc.now()
	mc.mu.Unlock()
	return func() {
		mc.mu.Lock()
		mc.inflight--
		mc.lastActivity = mc.now()
		mc.mu.Unlock()
	}
}

// Status describes the machine to the coordinator.
func (mc *Machine) Status(now time.Time) hostlink.MachineStatus {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	st := hostlink.MachineStatus{SessionID: mc.sessionID, Epoch: mc.epoch, State: stateRunning,
		PID: mc.vm.Info().PID, LastActivity: mc.lastActivity}
	if mc.inflight > 0 {
		st.LastActivity = now
	}
	switch {
	case mc.exited:
		st.State = stateExited
	case mc.paused:
		st.State = statePaused
	}
	return st
}
