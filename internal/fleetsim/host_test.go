package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// guestState is what a guest carries across snapshots: the highest outbox
// seq it applied and every item it applied, in order (its "effects").
type guestState struct {
	Applied int64
	Effects []string
}

func (g guestState) clone() guestState { return guestState{g.Applied, slices.Clone(g.Effects)} }

// machine is one simulated microVM.
type machine struct {
	epoch  int64
	gen    uint64 // host generation when started or claimed at a newer epoch
	paused bool   // paused by the lease or by a capture in progress
	exited bool   // the VM died on its own
	guest  guestState
	active time.Time
}

// world is everything outside the coordinator: hosts, their machines and
// the blob store. One mutex guards it all; it is never held while sleeping
// or calling the coordinator, so fake time can always advance.
type world struct {
	mu     sync.Mutex
	hosts  []*host
	byID   map[domain.HostID]*host
	chunks map[string]bool       // blob store: chunk key -> stored
	states map[string]guestState // snapshot id -> the guest state its "state" chunk holds
	bad    []string              // invariant violations seen between steps
	facts  domain.HostFacts
	hostH  http.Handler // the coordinator's HostHandler
	// sabotage breaks the hosts on purpose (sabotage_test.go); zero: none.
	sabotage sabotage
}

// sabotage is a deliberate host defect each invariant check must catch.
type sabotage int

const (
	noSabotage   sabotage = iota
	noSelfFence           // hosts ignore the lease: a cut-off host's machines run on
	dropChunk             // a snapshot answers with a chunk it never stored
	lossyRestore          // a restore forgets the last item the snapshot applied
)

func newWorld() *world {
	return &world{
		byID: map[domain.HostID]*host{}, chunks: map[string]bool{}, states: map[string]guestState{},
		facts: domain.HostFacts{Arch: "amd64", Backend: domain.BackendFacts{Name: "sim", Version: "1", Acceleration: "none"}},
	}
}

func (w *world) violate(format string, args ...any) {
	w.bad = append(w.bad, fmt.Sprintf("t=%s ", clock())+fmt.Sprintf(format, args...))
}

// host is one simulated host agent plus its machines.
type host struct {
	w        *world
	id       domain.HostID
	name     string
	capacity int // machines it admits
	// Guarded by w.mu.
	up, cut   bool
	inc       int              // incarnation: bumped by a crash
	epochs    map[string]int64 // highest epoch per session; "on disk", survives a crash
	machines  map[string]*machine
	locks     map[string]chan struct{} // per-session locks (channels: durably blocking)
	gen       uint64
	lease     time.Duration
	renewed   time.Time
	interval  time.Duration
	cached    []string
	link      context.Context // ends when the link to the coordinator breaks
	breakLink context.CancelFunc
	alive     context.Context // ends when this incarnation crashes
	kill      context.CancelFunc
	chunkWait time.Duration // per-chunk upload time ("slow uploads")
	fetchWait time.Duration // restore fetch time
	stop      chan struct{} // ends this incarnation's heartbeat loop
	loopDone  chan struct{}
}

func newHost(w *world, id domain.HostID, name string, capacity int) *host {
	h := &host{w: w, id: id, name: name, capacity: capacity, epochs: map[string]int64{},
		machines: map[string]*machine{}, locks: map[string]chan struct{}{}, interval: time.Second}
	w.hosts = append(w.hosts, h)
	w.byID[id] = h
	return h
}

func (h *host) leaseValidLocked(now time.Time) bool {
	return h.w.sabotage == noSelfFence || h.lease <= 0 || now.Before(h.renewed.Add(h.lease))
}

// expireLocked pauses every machine once the lease ran out, exactly as if a
// timer had fired at its end (it is called before any state is read).
func (h *host) expireLocked(now time.Time) {
	if h.leaseValidLocked(now) {
		return
	}
	for _, m := range h.machines {
		m.paused = true
	}
}

// liveLocked: running, not paused, and the lease still allows it.
func (h *host) liveLocked(m *machine, now time.Time) bool {
	return h.up && !m.exited && !m.paused && h.leaseValidLocked(now)
}

// unpauseLocked lets m run again if the lease allows, checking that no other
// host runs the session live.
func (h *host) unpauseLocked(sid string, m *machine, why string) {
	if m.exited || !h.leaseValidLocked(time.Now()) {
		return
	}
	m.paused = false
	h.w.checkLiveLocked(h, sid, why)
}

// checkLiveLocked records a violation if sid is live anywhere but on self.
func (w *world) checkLiveLocked(self *host, sid, why string) {
	now := time.Now()
	for _, o := range w.hosts {
		if m := o.machines[sid]; o != self && m != nil && o.liveLocked(m, now) {
			w.violate("session %s became live on %s (%s) while live on %s at epoch %d", sid, self.name, why, o.name, m.epoch)
		}
	}
}

// Transport implements coordinator.HostTransports.
func (w *world) Transport(_ context.Context, hostID domain.HostID) (http.RoundTripper, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	h := w.byID[hostID]
	if h == nil || !h.up || h.cut {
		return nil, fmt.Errorf("host %s: %w", hostID, hostlink.ErrHostNotConnected)
	}
	return rtFunc(h.roundTrip), nil
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var errLinkBroke = errors.New("host link broke; the answer was lost")

// roundTrip serves one coordinator request. The host's handler stops when
// the caller gives up or the host crashes; a silent partition goes
// unnoticed by the host, which finishes the command, but its answer is
// lost (the coordinator sees a link error).
func (h *host) roundTrip(r *http.Request) (*http.Response, error) {
	h.w.mu.Lock()
	link, alive, ok := h.link, h.alive, h.up && !h.cut
	h.w.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("host %s: %w", h.id, hostlink.ErrHostNotConnected)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(alive, cancel)
	defer stop()
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	status, out := h.serve(ctx, r.Method, r.URL.Path, r.Header.Get(hostlink.HeaderEpoch), body)
	if link.Err() != nil || r.Context().Err() != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", r.Method, r.URL.Path, h.name, errLinkBroke)
	}
	b, _ := json.Marshal(out)
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

func fail(status int, code, msg string) (int, any) {
	return status, hostlink.ErrorBody{Code: code, Error: msg}
}

// serve is the host's machine API: fence the epoch under the session lock,
// then dispatch.
func (h *host) serve(ctx context.Context, method, path, epochHdr string, body []byte) (int, any) {
	rest := strings.TrimPrefix(path, "/v1/machines/")
	sid, sub, _ := strings.Cut(rest, "/")
	epoch, err := strconv.ParseInt(epochHdr, 10, 64)
	if err != nil || sid == "" {
		return fail(http.StatusBadRequest, hostlink.CodeBadRequest, "bad request "+path)
	}
	h.w.mu.Lock()
	lk := h.locks[sid]
	if lk == nil {
		lk = make(chan struct{}, 1)
		h.locks[sid] = lk
	}
	h.w.mu.Unlock()
	select {
	case lk <- struct{}{}:
	case <-ctx.Done():
		return fail(http.StatusServiceUnavailable, hostlink.CodeUnavailable, "cancelled waiting for session lock")
	}
	defer func() { <-lk }()
	h.w.mu.Lock()
	h.expireLocked(time.Now())
	if epoch < h.epochs[sid] {
		high := h.epochs[sid]
		h.w.mu.Unlock()
		return fail(http.StatusConflict, hostlink.CodeStaleEpoch, fmt.Sprintf("epoch %d < %d", epoch, high))
	}
	h.epochs[sid] = epoch
	h.w.mu.Unlock()
	switch {
	case method == http.MethodPut && sub == "":
		var req hostlink.StartRequest
		_ = json.Unmarshal(body, &req)
		return h.start(ctx, sid, epoch, req.Restore)
	case method == http.MethodDelete && sub == "":
		h.w.mu.Lock()
		delete(h.machines, sid)
		h.w.mu.Unlock()
		return http.StatusNoContent, nil
	case method == http.MethodPost && sub == "snapshot":
		var req hostlink.SnapshotRequest
		_ = json.Unmarshal(body, &req)
		return h.snapshot(ctx, sid, req)
	case method == http.MethodPost && sub == "outbox":
		var req hostlink.OutboxDelivery
		_ = json.Unmarshal(body, &req)
		return h.outbox(sid, req.Items)
	case strings.HasPrefix(sub, "guest/"):
		return h.guest(sid)
	}
	return fail(http.StatusNotFound, hostlink.CodeNotFound, "no route "+method+" "+path)
}

// usableLocked returns sid's machine if it runs and may run.
func (h *host) usableLocked(sid string) (*machine, int, any) {
	m := h.machines[sid]
	switch {
	case m == nil || m.exited:
		st, b := fail(http.StatusNotFound, hostlink.CodeNotFound, "no running machine for session "+sid)
		return nil, st, b
	case !h.leaseValidLocked(time.Now()) || m.paused:
		st, b := fail(http.StatusServiceUnavailable, hostlink.CodePaused, "machine of session "+sid+" is paused")
		return nil, st, b
	}
	return m, 0, nil
}

// start boots or restores sid's machine; a machine already here is adopted
// at the newer epoch (and resumed if paused), like the real agent.
func (h *host) start(ctx context.Context, sid string, epoch int64, rs *hostlink.RestoreSpec) (int, any) {
	h.w.mu.Lock()
	now := time.Now()
	if !h.leaseValidLocked(now) {
		h.w.mu.Unlock()
		return fail(http.StatusServiceUnavailable, hostlink.CodePaused, "lease expired")
	}
	if m := h.machines[sid]; m != nil && m.exited {
		delete(h.machines, sid) // exited: start a new one
	}
	if m := h.machines[sid]; m != nil {
		defer h.w.mu.Unlock()
		if epoch > m.epoch {
			m.epoch = epoch
			h.gen++
			m.gen = h.gen
		}
		if m.paused {
			h.unpauseLocked(sid, m, "start adopted a paused machine")
		}
		return http.StatusOK, hostlink.MachineStatus{SessionID: sid, Epoch: m.epoch, State: "running"}
	}
	if len(h.machines) >= h.capacity {
		h.w.mu.Unlock()
		return fail(http.StatusConflict, hostlink.CodeCapacity, "host full")
	}
	var g guestState
	if rs != nil {
		var man manifest
		_ = json.Unmarshal(rs.Manifests, &man)
		for _, k := range man.Chunks {
			if !h.w.chunks[k] {
				h.w.mu.Unlock()
				return fail(http.StatusUnprocessableEntity, hostlink.CodeSnapshotMissing, "chunk "+k+" is not stored")
			}
		}
		g = h.w.states[rs.SnapshotID].clone()
		if h.w.sabotage == lossyRestore && len(g.Effects) > 0 {
			g.Effects = g.Effects[:len(g.Effects)-1]
		}
	}
	inc, wait := h.inc, h.fetchWait
	h.w.mu.Unlock()
	if rs != nil && wait > 0 && !sleepCtx(ctx, wait) {
		return fail(http.StatusServiceUnavailable, hostlink.CodeUnavailable, "restore cancelled")
	}
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.inc != inc || !h.leaseValidLocked(time.Now()) {
		return fail(http.StatusServiceUnavailable, hostlink.CodePaused, "host crashed or lease expired during restore")
	}
	h.gen++
	h.machines[sid] = &machine{epoch: epoch, gen: h.gen, guest: g, active: time.Now()}
	if rs != nil {
		h.cacheLocked(rs.SnapshotID)
	}
	h.w.checkLiveLocked(h, sid, fmt.Sprintf("started at epoch %d", epoch))
	return http.StatusOK, hostlink.MachineStatus{SessionID: sid, Epoch: epoch, State: "running"}
}

func (h *host) cacheLocked(snapID string) {
	h.cached = append([]string{snapID}, slices.DeleteFunc(h.cached, func(s string) bool { return s == snapID })...)
	h.cached = h.cached[:min(len(h.cached), 8)]
}

// manifest is what a simulated snapshot names: its chunk keys.
type manifest struct {
	Chunks []string `json:"chunks"`
}

const dataChunks = 3

// sleepCtx sleeps d of fake time; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// snapshot pauses the machine, uploads its chunks (slowly, if set; a crash
// or broken link stops the upload halfway), then stores the guest state as
// the last chunk and destroys or resumes the machine.
func (h *host) snapshot(ctx context.Context, sid string, req hostlink.SnapshotRequest) (int, any) {
	h.w.mu.Lock()
	m, st, b := h.usableLocked(sid)
	if m == nil {
		h.w.mu.Unlock()
		return st, b
	}
	m.paused = true
	captured, inc, wait := m.guest.clone(), h.inc, h.chunkWait
	h.w.mu.Unlock()
	keys := make([]string, 0, dataChunks+1)
	for i := range dataChunks {
		if wait > 0 && !sleepCtx(ctx, wait) {
			return h.abortSnapshot(sid, m, inc, "upload cancelled")
		}
		h.w.mu.Lock()
		if h.inc != inc {
			h.w.mu.Unlock()
			return fail(http.StatusServiceUnavailable, hostlink.CodeUnavailable, "host crashed")
		}
		key := fmt.Sprintf("%s/%d", req.SnapshotID, i)
		h.w.chunks[key] = true
		keys = append(keys, key)
		h.w.mu.Unlock()
	}
	h.w.mu.Lock()
	if h.inc != inc || !h.leaseValidLocked(time.Now()) || h.machines[sid] != m {
		h.w.mu.Unlock()
		return h.abortSnapshot(sid, m, inc, "lease expired or machine gone during upload")
	}
	defer h.w.mu.Unlock()
	key := req.SnapshotID + "/state"
	h.w.states[req.SnapshotID] = captured
	h.w.chunks[key] = h.w.sabotage != dropChunk
	keys = append(keys, key)
	h.cacheLocked(req.SnapshotID)
	if req.Destroy {
		delete(h.machines, sid)
	} else {
		h.unpauseLocked(sid, m, "snapshot done")
	}
	man, _ := json.Marshal(manifest{Chunks: keys})
	return http.StatusOK, hostlink.SnapshotResponse{SnapshotID: req.SnapshotID, Manifests: man, Facts: h.w.facts,
		Bytes: 4 << 20, Uploaded: 1 << 20, OutboxSeq: captured.Applied}
}

// abortSnapshot lets the machine run on after a failed capture.
func (h *host) abortSnapshot(sid string, m *machine, inc int, why string) (int, any) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	if h.inc == inc && h.machines[sid] == m {
		h.unpauseLocked(sid, m, "snapshot aborted")
	}
	return fail(http.StatusInternalServerError, hostlink.CodeSnapshotFailed, why)
}

// outbox applies items in seq order, skipping what the guest applied.
func (h *host) outbox(sid string, items []hostlink.OutboxItem) (int, any) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	m, st, b := h.usableLocked(sid)
	if m == nil {
		return st, b
	}
	for _, it := range items {
		if it.Seq != m.guest.Applied+1 {
			continue
		}
		if slices.Contains(m.guest.Effects, it.ID) {
			h.w.violate("session %s on %s: outbox item %s (seq %d) applied twice in one lineage", sid, h.name, it.ID, it.Seq)
		}
		m.guest.Applied = it.Seq
		m.guest.Effects = append(m.guest.Effects, it.ID)
	}
	m.active = time.Now()
	return http.StatusOK, hostlink.OutboxApplied{Applied: m.guest.Applied}
}

// guest answers an exec-like guest request: activity on a usable machine.
func (h *host) guest(sid string) (int, any) {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	m, st, b := h.usableLocked(sid)
	if m == nil {
		return st, b
	}
	m.active = time.Now()
	return http.StatusOK, map[string]int{"exit_code": 0}
}
