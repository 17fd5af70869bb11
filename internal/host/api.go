package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"

	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// routes is the machine API served to the coordinator over the link.
func (a *Agent) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+hostlink.PathMachines, a.listMachines)
	mux.HandleFunc("PUT "+hostlink.PathMachine, a.startMachine)
	mux.HandleFunc("DELETE "+hostlink.PathMachine, a.destroyMachine)
	mux.HandleFunc(hostlink.PathGuest+"{rest...}", a.proxyGuest)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		hostlink.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no route %s %s on this host", r.Method, r.URL.Path))
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
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

// writeFenceError answers a failed fence: 409 stale_epoch or 500.
func (a *Agent) writeFenceError(w http.ResponseWriter, sid string, err error) {
	var stale *staleEpochError
	if errors.As(err, &stale) {
		hostlink.WriteError(w, http.StatusConflict, "stale_epoch", err.Error())
		return
	}
	a.log.Error("fence session command", "session_id", sid, "error", err)
	hostlink.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
}

func (a *Agent) startMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.StartRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode start request: "+err.Error())
		return
	}
	epoch, ok := headerEpoch(w, r, req.Epoch)
	if !ok {
		return
	}
	if epoch != req.Epoch || req.Epoch < 0 {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("epoch %d in the body, %d in %s", req.Epoch, epoch, hostlink.HeaderEpoch))
		return
	}
	spec := req.Spec
	if spec.MemoryMiB <= 0 {
		spec.MemoryMiB = defaultMemoryMiB
	}
	if spec.VCPUs <= 0 {
		spec.VCPUs = defaultVCPUs
	}
	log := a.log.With("session_id", sid, "epoch", req.Epoch)

	unlock := a.locks.lock(sid)
	defer unlock()
	if err := a.fence(sid, req.Epoch); err != nil {
		a.writeFenceError(w, sid, err)
		return
	}
	a.mu.Lock()
	mc := a.machines[sid]
	if mc != nil && !mc.exited {
		if mc.epoch < req.Epoch { // a newer op claims the running machine
			mc.epoch = req.Epoch
			a.gen++
			mc.gen = a.gen
		}
		st := mc.status()
		a.mu.Unlock()
		if err := a.writeRecord(sid, mc.epoch, mc.spec); err != nil {
			log.Warn("record adopted machine", "error", err)
		}
		writeJSON(w, http.StatusOK, st)
		return
	}
	a.mu.Unlock()
	if mc != nil { // exited: clean up before booting again
		if err := a.destroy(r.Context(), sid, "exited; starting again"); err != nil {
			hostlink.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
			return
		}
	}
	if err := a.reserve(sid, spec); err != nil {
		hostlink.WriteError(w, http.StatusConflict, "capacity", err.Error())
		return
	}
	defer a.unreserve(sid)

	m, err := a.boot(r, sid, req.Epoch, spec)
	if err != nil {
		log.Error("start machine", "error", err)
		hostlink.WriteError(w, http.StatusInternalServerError, "boot_failed", err.Error())
		return
	}
	mc = a.add(sid, req.Epoch, spec, m)
	log.Info("machine started", "pid", m.Info().PID, "memory_mib", spec.MemoryMiB, "vcpus", spec.VCPUs)
	a.mu.Lock()
	st := mc.status()
	a.mu.Unlock()
	writeJSON(w, http.StatusOK, st)
}

func (a *Agent) writeRecord(sid string, epoch int64, spec hostlink.MachineSpec) error {
	b, err := json.Marshal(machineRecord{SessionID: sid, Epoch: epoch, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs})
	if err != nil {
		return err
	}
	return writeFileSync(a.machineDir(sid), machineFile, b)
}

func (a *Agent) boot(r *http.Request, sid string, epoch int64, spec hostlink.MachineSpec) (vmm.Machine, error) {
	dir := a.machineDir(sid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create machine dir of session %s: %w", sid, err)
	}
	if err := a.writeRecord(sid, epoch, spec); err != nil {
		return nil, fmt.Errorf("record machine of session %s: %w", sid, err)
	}
	m, err := a.deps.Backend.Boot(r.Context(), vmm.Spec{
		SessionID: sid,
		Epoch:     epoch,
		Dir:       dir,
		MemoryMiB: spec.MemoryMiB,
		VCPUs:     spec.VCPUs,
		Env:       spec.Env,
	})
	if err != nil {
		_ = cleanMachineDir(dir)
		return nil, fmt.Errorf("boot machine of session %s: %w", sid, err)
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
		a.writeFenceError(w, sid, err)
		return
	}
	if err := a.destroy(r.Context(), sid, "coordinator asked"); err != nil {
		a.log.Error("destroy machine", "session_id", sid, "error", err)
		hostlink.WriteError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// proxyGuest forwards the rest of the path to the machine's guest daemon;
// WebSocket upgrades (exec, terminals) pass through.
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
	err := a.fence(sid, epoch)
	unlock()
	if err != nil {
		a.writeFenceError(w, sid, err)
		return
	}
	a.mu.Lock()
	mc := a.machines[sid]
	running := mc != nil && !mc.exited
	a.mu.Unlock()
	if !running {
		hostlink.WriteError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no running machine for session %s on this host", sid))
		return
	}
	rest := "/" + r.PathValue("rest")
	log := a.log.With("session_id", sid)
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
