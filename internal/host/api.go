package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// maxCommandBody bounds a command's JSON body; a restore's manifests list
// every chunk (about 70 bytes per 4 MiB of disk).
const maxCommandBody = 64 << 20

// routes is the machine API served to the coordinator over the link.
func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+hostlink.PathMachines, a.listMachines)
	mux.HandleFunc("PUT "+hostlink.PathMachine, a.startMachine)
	mux.HandleFunc("DELETE "+hostlink.PathMachine, a.destroyMachine)
	mux.HandleFunc("POST "+hostlink.PathSnapshot, a.snapshotCommand)
	mux.HandleFunc("POST "+hostlink.PathOutbox, a.deliverOutbox)
	mux.HandleFunc("POST "+hostlink.PathCapture, a.captureCommand)
	mux.HandleFunc(hostlink.PathGuest+"{rest...}", a.proxyGuest)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		hostlink.WriteError(w, http.StatusNotFound, hostlink.CodeNotFound, fmt.Sprintf("no route %s %s on this host", r.Method, r.URL.Path))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError is a failure with the answer the coordinator gets.
type apiError struct {
	status int
	code   string
	err    error
	tail   string // output tail of a failed warm-up
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func failure(status int, code string, err error) *apiError {
	return &apiError{status: status, code: code, err: err}
}

// writeErr answers err: 409 stale_epoch, its apiError answer, or 500.
func (a *Agent) writeErr(w http.ResponseWriter, sid string, err error) {
	var stale *staleEpochError
	var ae *apiError
	switch {
	case errors.As(err, &stale):
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, err.Error())
	case errors.As(err, &ae):
		hostlink.WriteErrorBody(w, ae.status, hostlink.ErrorBody{Error: err.Error(), Code: ae.code, OutputTail: ae.tail})
	default:
		a.log.Error("session command failed", "session_id", sid, "error", err)
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, err.Error())
	}
}

func (a *Agent) listMachines(w http.ResponseWriter, _ *http.Request) {
	_, ms := a.snapshotState()
	writeJSON(w, http.StatusOK, ms)
}

// sessionFrom validates the {id} path value.
func sessionFrom(w http.ResponseWriter, r *http.Request) (string, bool) {
	sid := r.PathValue("id")
	if !validSessionID(sid) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("bad session id %q", sid))
		return "", false
	}
	return sid, true
}

// headerEpoch reads HeaderEpoch; required unless def >= 0 is given.
func headerEpoch(w http.ResponseWriter, r *http.Request, def int64) (int64, bool) {
	v := r.Header.Get(hostlink.HeaderEpoch)
	if v == "" && def >= 0 {
		return def, true
	}
	e, err := strconv.ParseInt(v, 10, 64)
	if err != nil || e < 0 {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("header %s: want a non-negative integer, got %q", hostlink.HeaderEpoch, v))
		return 0, false
	}
	return e, true
}

// decodeCommand reads a JSON command whose body names an epoch, and checks
// it against HeaderEpoch.
func decodeCommand(w http.ResponseWriter, r *http.Request, v any, epoch func() int64) bool {
	if err := json.NewDecoder(io.LimitReader(r.Body, maxCommandBody)).Decode(v); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode request: "+err.Error())
		return false
	}
	if epoch == nil { // the command is fenced otherwise (image captures)
		return true
	}
	body := epoch()
	h, ok := headerEpoch(w, r, body)
	if !ok {
		return false
	}
	if h != body || body < 0 {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("epoch %d in the body, %d in %s", body, h, hostlink.HeaderEpoch))
		return false
	}
	return true
}

func (a *Agent) startMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.StartRequest
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	spec := req.Spec
	if spec.MemoryMiB <= 0 {
		spec.MemoryMiB = defaultMemoryMiB
	}
	if spec.VCPUs <= 0 {
		spec.VCPUs = defaultVCPUs
	}
	unlock := a.locks.lock(sid)
	defer unlock()
	st, err := a.start(r.Context(), sid, req.Epoch, spec, req.Restore, req.Harness)
	if err != nil {
		a.writeErr(w, sid, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// start boots or restores sid's machine, or answers with the one running.
// Callers hold the session lock.
func (a *Agent) start(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, restore *hostlink.RestoreSpec, harness json.RawMessage) (hostlink.MachineStatus, error) {
	log := a.log.With("session_id", sid, "epoch", epoch)
	if err := a.fence(sid, epoch); err != nil {
		return hostlink.MachineStatus{}, err
	}
	a.forgetCapture(sid) // the coordinator is past that capture
	if a.leaseExpired() {
		return hostlink.MachineStatus{}, failure(http.StatusServiceUnavailable, hostlink.CodePaused, a.leaseError())
	}
	if st, ok, err := a.adoptRunning(ctx, sid, epoch); ok || err != nil {
		return st, err
	}
	if (restore != nil || len(harness) > 0) && a.deps.DiskChunks == nil {
		return hostlink.MachineStatus{}, failure(http.StatusNotImplemented, hostlink.CodeUnsupported,
			fmt.Errorf("restore session %s: this host has no chunk store configured", sid))
	}
	if err := a.reserve(sid, spec); err != nil {
		return hostlink.MachineStatus{}, failure(http.StatusConflict, hostlink.CodeCapacity, err)
	}
	defer a.unreserve(sid)
	ctx, cancel := a.opContext(ctx)
	defer cancel()
	var (
		m      vmm.Machine
		parent chunk.Manifest
		err    error
	)
	if restore == nil {
		m, err = a.boot(ctx, sid, epoch, spec, harness)
	} else {
		m, parent, err = a.restore(ctx, sid, epoch, spec, restore, harness)
	}
	if err != nil {
		log.Error("start machine", "restore", restore != nil, "error", err)
		return hostlink.MachineStatus{}, err
	}
	mc := a.add(sid, epoch, spec, m)
	a.mu.Lock()
	mc.memParent = parent
	a.mu.Unlock()
	if err := a.checkHarness(ctx, mc); err != nil {
		if derr := a.destroy(ctx, sid, "harness did not start"); derr != nil {
			log.Error("destroy machine whose harness did not start", "error", derr)
		}
		return hostlink.MachineStatus{}, err
	}
	log.Info("machine started", "pid", m.Info().PID, "memory_mib", spec.MemoryMiB, "vcpus", spec.VCPUs, "restored", restore != nil)
	a.mu.Lock()
	defer a.mu.Unlock()
	return mc.status(a.deps.Now()), nil
}

// adoptRunning answers a start of a session whose machine is already here:
// a running one is adopted at epoch, a paused one resumed, an exited one
// destroyed so a new one can start (ok false). Callers hold the session
// lock.
func (a *Agent) adoptRunning(ctx context.Context, sid string, epoch int64) (st hostlink.MachineStatus, ok bool, err error) {
	a.mu.Lock()
	mc := a.machines[sid]
	a.mu.Unlock()
	if mc == nil {
		return st, false, nil
	}
	a.mu.Lock()
	exited, paused, newer := mc.exited, mc.paused, epoch > mc.epoch
	a.mu.Unlock()
	if exited {
		if err := a.destroy(ctx, sid, "exited; starting again"); err != nil {
			return st, false, err
		}
		return st, false, nil
	}
	if err := a.adoptEpoch(mc, epoch); err != nil {
		return st, false, err
	}
	if paused {
		a.resumeLocked(ctx, mc, "start request")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if mc.paused {
		return st, false, failure(http.StatusServiceUnavailable, hostlink.CodePaused,
			fmt.Errorf("machine of session %s is paused and did not resume", sid))
	}
	if newer { // a newer op claims the running machine
		a.gen++
		mc.gen = a.gen
	}
	return mc.status(a.deps.Now()), true, nil
}

func (a *Agent) writeRecord(sid string, epoch int64, spec hostlink.MachineSpec, paused bool) error {
	b, err := json.Marshal(machineRecord{SessionID: sid, Epoch: epoch, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Paused: paused,
		Harness: spec.Harness, HarnessID: spec.HarnessID})
	if err != nil {
		return err
	}
	return writeFileSync(a.machineDir(sid), machineFile, b)
}

func (a *Agent) boot(ctx context.Context, sid string, epoch int64, spec hostlink.MachineSpec, harness json.RawMessage) (vmm.Machine, error) {
	dir := a.machineDir(sid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create machine dir of session %s: %w", sid, err)
	}
	if err := a.writeRecord(sid, epoch, spec, false); err != nil {
		return nil, fmt.Errorf("record machine of session %s: %w", sid, err)
	}
	vspec := vmm.Spec{SessionID: sid, Epoch: epoch, Dir: dir, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Env: sessionEnv(sid, spec.Env)}
	shared := map[string]chunk.Manifest{}
	if err := addHarness(shared, harness); err != nil {
		_ = cleanMachineDir(dir)
		return nil, err
	}
	if err := a.attachShared(ctx, sid, shared, &vspec); err != nil {
		_ = cleanMachineDir(dir)
		return nil, err
	}
	m, err := a.deps.Backend.Boot(ctx, vspec)
	if err != nil {
		_ = cleanMachineDir(dir)
		return nil, failure(http.StatusInternalServerError, "boot_failed", fmt.Errorf("boot machine of session %s: %w", sid, err))
	}
	return m, nil
}

func (a *Agent) destroyMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	epoch, ok := headerEpoch(w, r, -1)
	if !ok {
		return
	}
	unlock := a.locks.lock(sid)
	defer unlock()
	if err := a.fence(sid, epoch); err != nil {
		a.writeErr(w, sid, err)
		return
	}
	if err := a.destroy(r.Context(), sid, "coordinator asked"); err != nil {
		a.writeErr(w, sid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// usableMachine fences sid at epoch and returns its machine if it runs and
// the lease allows it to. Callers hold the session lock.
func (a *Agent) usableMachine(sid string, epoch int64) (*machine, error) {
	if err := a.fence(sid, epoch); err != nil {
		return nil, err
	}
	a.mu.Lock()
	mc := a.machines[sid]
	running := mc != nil && !mc.exited
	paused := running && mc.paused
	a.mu.Unlock()
	switch {
	case !running:
		return nil, failure(http.StatusNotFound, hostlink.CodeNotFound, fmt.Errorf("no running machine for session %s on this host", sid))
	case a.leaseExpired():
		return nil, failure(http.StatusServiceUnavailable, hostlink.CodePaused, a.leaseError())
	case paused:
		return nil, failure(http.StatusServiceUnavailable, hostlink.CodePaused, fmt.Errorf("machine of session %s is paused", sid))
	}
	return mc, nil
}

// proxyGuest forwards the rest of the path to the machine's guest daemon;
// WebSocket upgrades (exec, terminals) pass through. Each request counts
// as activity of the session while it lasts.
func (a *Agent) proxyGuest(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	epoch, ok := headerEpoch(w, r, -1)
	if !ok {
		return
	}
	unlock := a.locks.lock(sid)
	mc, err := a.usableMachine(sid, epoch)
	unlock()
	if err != nil {
		a.writeErr(w, sid, err)
		return
	}
	done := a.active(mc)
	defer done()
	rest := "/" + r.PathValue("rest")
	log := a.log.With("session_id", sid)
	if r.Method == http.MethodPost && rest == guestapi.PathExecRun {
		a.relayExecRun(w, r, mc, log)
		return
	}
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "guest"
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = "guest"
		},
		Transport:     mc.transport,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			log.Info("guest proxy failed", "error", err)
			hostlink.WriteError(w, http.StatusBadGateway, hostlink.CodeBadGateway, fmt.Sprintf("reach guest of session %s: %v", sid, err))
		},
	}
	proxy.ServeHTTP(w, r)
}

// relayExecRun forwards a plain exec to the guest and streams its answer
// back with guestapi.RelayStream: a command that exits at once crosses the
// link as one message (the generic proxy flushes every write separately).
func (a *Agent) relayExecRun(w http.ResponseWriter, r *http.Request, mc *machine, log *slog.Logger) {
	body := io.Reader(r.Body)
	if r.ContentLength >= 0 && r.ContentLength <= smallExecBody {
		b, err := io.ReadAll(r.Body) // in memory, it goes out with the headers in one write
		if err != nil {
			hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "read exec request: "+err.Error())
			return
		}
		body = bytes.NewReader(b)
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://guest"+guestapi.PathExecRun, body)
	if err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "build guest exec: "+err.Error())
		return
	}
	out.Header = r.Header.Clone()
	out.ContentLength = r.ContentLength
	resp, err := mc.transport.RoundTrip(out)
	if err != nil {
		log.Info("guest exec failed", "error", err)
		hostlink.WriteError(w, http.StatusBadGateway, hostlink.CodeBadGateway, "reach guest: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	guestapi.RelayStream(w, resp.Body)
}

// smallExecBody is the largest exec request the relay holds in memory.
const smallExecBody = 64 << 10

// active marks a guest request in flight on mc; call the result when it
// ends.
func (a *Agent) active(mc *machine) (done func()) {
	a.mu.Lock()
	mc.inflight++
	mc.lastActivity = a.deps.Now()
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		mc.inflight--
		mc.lastActivity = a.deps.Now()
		a.mu.Unlock()
	}
}

// EnvSessionID names the session to the processes in its guest.
const EnvSessionID = "ENGRAMS_SESSION_ID"

// sessionEnv is env plus the session's identity.
func sessionEnv(sid string, env map[string]string) map[string]string {
	out := make(map[string]string, len(env)+1)
	maps.Copy(out, env)
	out[EnvSessionID] = sid
	return out
}

// addHarness puts the harness manifest of a start request (if any) into
// shared, replacing the one a snapshot named.
func addHarness(shared map[string]chunk.Manifest, harness json.RawMessage) error {
	if len(harness) == 0 {
		return nil
	}
	m, err := chunk.Decode(harness)
	if err != nil {
		return failure(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("harness manifest: %w", err))
	}
	shared[hostlink.RoleHarness] = m
	return nil
}
