package coordinatortest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// FakeHost is a host's machine API in memory: it keeps the highest epoch
// per session like a real host and refuses lower ones. Its guests apply
// outbox items; what a guest applied travels inside its snapshots, like a
// real guest's disk.
type FakeHost struct {
	Mu       sync.Mutex       // guards the fields; a test holding it stalls the host
	machines map[string]int64 // session -> epoch
	epochs   map[string]int64
	applied  map[string]int64 // session -> outbox seq its running guest applied
	FailBoot bool
	WarmFail string // Captures answer warmup_failed with this tail
	Captures []hostlink.CaptureRequest
	Starts   []hostlink.StartRequest
	Full     bool // answer 409 capacity
	Corrupt  bool // restores fail: snapshot_corrupt
	// FailSnapshot, when set, is the error every snapshot fails with (the
	// machine keeps running).
	FailSnapshot string
	Deletes      int
	snaps        *SnapStore
}

// SnapStore plays the blob store: what each snapshot captured, shared by
// every fake host, and every application of an outbox item per lineage.
type SnapStore struct {
	mu        sync.Mutex
	applied   map[string]int64          // snapshot -> guest applied seq
	effects   map[string]map[string]int // session -> item id -> times applied in the surviving lineage
	snapItems map[string]map[string]int // snapshot -> effects at capture
}

func NewSnapStore() *SnapStore {
	return &SnapStore{applied: map[string]int64{}, effects: map[string]map[string]int{}, snapItems: map[string]map[string]int{}}
}

func copyCounts(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (h *FakeHost) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	if id, ok := strings.CutPrefix(r.URL.Path, "/v1/captures/"); ok {
		h.capture(w, r, id)
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v1/machines/")
	id, sub, _ := strings.Cut(rest, "/")
	epoch, _ := strconv.ParseInt(r.Header.Get(hostlink.HeaderEpoch), 10, 64)
	if epoch < h.epochs[id] {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeStaleEpoch, Error: "stale"})
		return
	}
	h.epochs[id] = epoch
	switch {
	case r.Method == http.MethodPut:
		h.start(w, r, id, epoch)
	case r.Method == http.MethodDelete:
		delete(h.machines, id)
		h.Deletes++
		w.WriteHeader(http.StatusNoContent)
	case sub == "snapshot":
		h.snapshot(w, r, id)
	case sub == "outbox":
		h.outbox(w, r, id)
	}
}

func (h *FakeHost) start(w http.ResponseWriter, r *http.Request, id string, epoch int64) {
	var req hostlink.StartRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.Starts = append(h.Starts, req)
	switch {
	case h.Full:
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeCapacity, Error: "no room"})
		return
	case h.FailBoot:
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Error: "kernel panic"})
		return
	case req.Restore != nil && h.Corrupt:
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeSnapshotCorrupt, Error: "chunk 3 hash mismatch"})
		return
	}
	h.machines[id] = epoch
	h.applied[id] = 0
	if req.Restore != nil {
		h.snaps.mu.Lock()
		h.applied[id] = h.snaps.applied[req.Restore.SnapshotID]
		h.snaps.effects[id] = copyCounts(h.snaps.snapItems[req.Restore.SnapshotID]) // roll back to the snapshot's lineage
		h.snaps.mu.Unlock()
	}
	_ = json.NewEncoder(w).Encode(hostlink.MachineStatus{SessionID: id, Epoch: epoch, State: "running"})
}

func (h *FakeHost) snapshot(w http.ResponseWriter, r *http.Request, id string) {
	var req hostlink.SnapshotRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	if _, ok := h.machines[id]; !ok {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeNotFound, Error: "no machine"})
		return
	}
	if h.FailSnapshot != "" {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Error: h.FailSnapshot})
		return
	}
	h.snaps.mu.Lock()
	h.snaps.applied[req.SnapshotID] = h.applied[id]
	h.snaps.snapItems[req.SnapshotID] = copyCounts(h.snaps.effects[id])
	h.snaps.mu.Unlock()
	if req.Destroy {
		delete(h.machines, id)
	}
	_ = json.NewEncoder(w).Encode(hostlink.SnapshotResponse{SnapshotID: req.SnapshotID, Manifests: json.RawMessage(`{}`),
		Facts: TestFacts, Bytes: 100, Uploaded: 10, OutboxSeq: h.applied[id]})
}

func (h *FakeHost) outbox(w http.ResponseWriter, r *http.Request, id string) {
	var req hostlink.OutboxDelivery
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.snaps.mu.Lock()
	if h.snaps.effects[id] == nil {
		h.snaps.effects[id] = map[string]int{}
	}
	for _, it := range req.Items {
		if it.Seq == h.applied[id]+1 {
			h.applied[id] = it.Seq
			h.snaps.effects[id][it.ID]++
		}
	}
	h.snaps.mu.Unlock()
	_ = json.NewEncoder(w).Encode(hostlink.OutboxApplied{Applied: h.applied[id]})
}

var TestFacts = domain.HostFacts{Arch: "amd64", Backend: domain.BackendFacts{Name: "fake", Version: "1", Acceleration: "none", RootFS: true, Harness: true}}

func (h *FakeHost) Running(id domain.SessionID) bool {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	_, ok := h.machines[string(id)]
	return ok
}

// Fleet routes to fake hosts; a host missing from the map is unreachable.
type Fleet struct {
	mu    sync.Mutex
	hosts map[domain.HostID]*FakeHost
	down  map[domain.HostID]int // host -> calls to fail as unreachable
	snaps *SnapStore
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (f *Fleet) Transport(_ context.Context, hostID domain.HostID) (http.RoundTripper, error) {
	f.mu.Lock()
	h := f.hosts[hostID]
	if f.down[hostID] > 0 {
		f.down[hostID]--
		h = nil
	}
	f.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("host %s: %w", hostID, hostlink.ErrHostNotConnected)
	}
	return rtFunc(func(r *http.Request) (*http.Response, error) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		resp := rec.Result()
		resp.Request = r // as a RoundTripper must
		return resp, nil
	}), nil
}

// capture answers an image capture: a base snapshot of the root
// filesystem it was given, or a failed warm-up with WarmFail as its tail.
func (h *FakeHost) capture(w http.ResponseWriter, r *http.Request, _ string) {
	var req hostlink.CaptureRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.Captures = append(h.Captures, req)
	if h.WarmFail != "" {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeWarmupFailed, Error: "warm-up exited with status 3", OutputTail: h.WarmFail})
		return
	}
	ms := map[string]json.RawMessage{"memory": json.RawMessage(`{}`), hostlink.RoleRootFS: req.RootFS}
	raw, _ := json.Marshal(ms)
	_ = json.NewEncoder(w).Encode(hostlink.CaptureResponse{SnapshotID: req.SnapshotID, Manifests: raw, Facts: TestFacts,
		StagesMS: map[string]int64{"boot": 30, "warmup": 20}})
}

// Effects is how often each outbox item took effect in session sid's
// surviving lineage.
func (s *SnapStore) Effects(sid domain.SessionID) map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return copyCounts(s.effects[string(sid)])
}
