package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// bootLocked starts an incarnation of the host agent: a new link, and a
// loop that registers, then heartbeats every interval.
func (h *host) bootLocked() {
	h.up = true
	h.link, h.breakLink = context.WithCancel(context.Background())
	h.alive, h.kill = context.WithCancel(context.Background())
	h.stop, h.loopDone = make(chan struct{}), make(chan struct{})
	go h.loop(h.stop, h.loopDone)
}

// loop registers on every new link (a restart or a healed partition), then
// heartbeats on it, until stop.
func (h *host) loop(stop, done chan struct{}) {
	defer close(done)
	var registeredOn context.Context
	for {
		h.w.mu.Lock()
		link, wait := h.link, h.interval
		h.w.mu.Unlock()
		if registeredOn != link {
			if h.call(true) {
				registeredOn = link
			} else {
				wait = 500 * time.Millisecond
			}
		} else {
			h.call(false)
		}
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// call sends a register or heartbeat through the coordinator's host
// handler and acts on the answer: renew the lease (from the time it was
// sent) and reconcile ownership. It reports whether an answer arrived.
func (h *host) call(register bool) bool {
	h.w.mu.Lock()
	if !h.up || h.cut {
		h.w.mu.Unlock()
		return false
	}
	sent := time.Now()
	h.expireLocked(sent)
	gen, link := h.gen, h.link
	ms := make([]hostlink.MachineStatus, 0, len(h.machines))
	for sid, m := range h.machines {
		state := "running"
		switch {
		case m.exited:
			state = "exited"
		case m.paused || !h.leaseValidLocked(sent):
			state = "paused"
		}
		ms = append(ms, hostlink.MachineStatus{SessionID: sid, Epoch: m.epoch, State: state, LastActivity: m.active})
	}
	capa := domain.Capacity{MemoryMiB: 256 * h.capacity, VCPUs: h.capacity, MaxSessions: h.capacity, Sessions: len(h.machines)}
	var in any = hostlink.HeartbeatRequest{Capacity: capa, Machines: ms, Snapshots: slices.Clone(h.cached)}
	path := hostlink.PathHeartbeat
	if register {
		in, path = hostlink.RegisterRequest{Name: h.name, Facts: h.w.facts, Capacity: capa, Machines: ms}, hostlink.PathRegister
	}
	h.w.mu.Unlock()

	b, _ := json.Marshal(in)
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(b))
	req = req.WithContext(hostlink.WithHostID(context.Background(), h.id))
	rec := httptest.NewRecorder()
	h.w.hostH.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return false
	}
	var ans struct {
		Owned    []hostlink.Ownership `json:"owned"`
		Lease    time.Duration        `json:"lease_ns"`
		Interval time.Duration        `json:"heartbeat_interval_ns"`
	}
	if json.Unmarshal(rec.Body.Bytes(), &ans) != nil {
		return false
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.link != link || h.cut || !h.up {
		return false // the link broke meanwhile: the answer never arrived
	}
	h.expireLocked(time.Now())
	if sent.After(h.renewed) {
		h.renewed = sent
	}
	h.lease = ans.Lease
	if ans.Interval > 0 {
		h.interval = ans.Interval
	}
	h.reconcileLocked(ans.Owned, gen)
	return true
}

// reconcileLocked converges on the ownership answer like the real agent:
// machines not owned are destroyed, a newer owned epoch is adopted, a
// paused owned machine resumes. Machines started or claimed after the
// request was sent (gen) and sessions with a command in flight are left
// for the next answer.
func (h *host) reconcileLocked(owned []hostlink.Ownership, gen uint64) {
	want := make(map[string]int64, len(owned))
	for _, o := range owned {
		want[o.SessionID] = max(want[o.SessionID], o.Epoch)
	}
	for sid, m := range h.machines {
		if m.gen > gen || len(h.locks[sid]) > 0 {
			continue
		}
		e, ok := want[sid]
		if !ok {
			delete(h.machines, sid)
			continue
		}
		if e > m.epoch {
			m.epoch = e
		}
		h.epochs[sid] = max(h.epochs[sid], e)
		if m.paused {
			h.unpauseLocked(sid, m, "ownership confirmed")
		}
	}
}

// crash kills the agent and every machine; the epoch record survives.
func (h *host) crash() {
	h.w.mu.Lock()
	h.up = false
	h.inc++
	h.machines = map[string]*machine{}
	h.breakLink()
	h.kill()
	stop, done := h.stop, h.loopDone
	h.w.mu.Unlock()
	close(stop)
	<-done
}

// restartAgent restarts the host agent alone: commands in flight die with
// it, the machines run on, and the new agent registers and reconciles them.
func (h *host) restartAgent() {
	h.w.mu.Lock()
	h.inc++
	h.breakLink()
	h.kill()
	stop, done := h.stop, h.loopDone
	h.w.mu.Unlock()
	close(stop)
	<-done
	h.w.mu.Lock()
	h.bootLocked()
	h.w.mu.Unlock()
}

// partition cuts the host off the coordinator: calls both ways fail, the
// machines run on until the lease expires.
func (h *host) partition() {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.cut = true
	h.breakLink()
}

func (h *host) heal() {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.cut = false
	h.link, h.breakLink = context.WithCancel(context.Background())
}

// shutdown stops the loop at the end of a run.
func (h *host) shutdown() {
	h.w.mu.Lock()
	up := h.up
	h.up = false
	if h.breakLink != nil {
		h.breakLink()
		h.kill()
	}
	stop, done := h.stop, h.loopDone
	h.w.mu.Unlock()
	if up {
		close(stop)
		<-done
	}
}
