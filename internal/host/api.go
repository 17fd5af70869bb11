package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/hostlink"
)

// maxCommandBody bounds a command's JSON body; a restore's manifests list
// every chunk (about 70 bytes per 4 MiB of disk).
const maxCommandBody = 64 << 20

// api is the machine API served to the coordinator over the link: it
// decodes each request, hands it to the lifecycle or the snapshot parts
// and encodes their answer.
type api struct {
	log    *slog.Logger
	reg    *machines.Registry
	life   *lifecycle
	snaps  *snapshots.Snapshots
	bounds boundReporter // guest answers over their bound
}

func (h *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+hostlink.PathMachines, h.listMachines)
	mux.HandleFunc("PUT "+hostlink.PathMachine, h.startMachine)
	mux.HandleFunc("DELETE "+hostlink.PathMachine, h.destroyMachine)
	mux.HandleFunc("POST "+hostlink.PathSnapshot, h.snapshot)
	mux.HandleFunc("POST "+hostlink.PathOutbox, h.deliverOutbox)
	mux.HandleFunc("POST "+hostlink.PathCapture, h.capture)
	mux.HandleFunc(hostlink.PathGuest+"{rest...}", h.proxyGuest)
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

// writeErr answers err: 409 stale_epoch, its failure's answer, or 500.
func (h *api) writeErr(w http.ResponseWriter, sid string, err error) {
	var stale *machines.StaleEpochError
	var fe *failure.Error
	switch {
	case errors.As(err, &stale):
		hostlink.WriteError(w, http.StatusConflict, hostlink.CodeStaleEpoch, err.Error())
	case errors.As(err, &fe):
		hostlink.WriteErrorBody(w, fe.Status, hostlink.ErrorBody{Error: err.Error(), Code: fe.Code, OutputTail: fe.Tail})
	default:
		h.log.Error("session command failed", "session_id", sid, "err", err)
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, err.Error())
	}
}

// sessionFrom validates the {id} path value.
func sessionFrom(w http.ResponseWriter, r *http.Request) (string, bool) {
	sid := r.PathValue("id")
	if !hostfs.ValidName(sid) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "bad session id "+guestapi.QuoteInput(sid))
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

func (h *api) listMachines(w http.ResponseWriter, _ *http.Request) {
	_, ms := h.reg.State()
	writeJSON(w, http.StatusOK, ms)
}

func (h *api) startMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.StartRequest
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	st, err := h.life.startCommand(r.Context(), sid, req)
	if err != nil {
		h.writeErr(w, sid, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (h *api) destroyMachine(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	epoch, ok := headerEpoch(w, r, -1)
	if !ok {
		return
	}
	if err := h.life.destroyCommand(r.Context(), sid, epoch); err != nil {
		h.writeErr(w, sid, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// snapshot serves POST …/snapshot: the machine's state goes to chunks
// (snapshotCommand). A retry of a capture that destroyed its machine
// repeats the epoch header the body names.
func (h *api) snapshot(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.SnapshotRequest
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	retry := r.Header.Get(hostlink.HeaderEpoch) == strconv.FormatInt(req.Epoch, 10)
	answer, err := h.life.snapshotCommand(r.Context(), sid, req, retry)
	if err != nil {
		h.writeErr(w, sid, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(answer)
}

func (h *api) deliverOutbox(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.OutboxDelivery
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	applied, err := h.life.deliver(r.Context(), sid, req)
	if err != nil {
		h.writeErr(w, sid, err)
		return
	}
	writeJSON(w, http.StatusOK, hostlink.OutboxApplied{Applied: applied})
}

// capture serves POST /v1/captures/{id}: an image's base snapshot.
func (h *api) capture(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !hostfs.ValidName(id) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("bad capture id %q", id))
		return
	}
	var req hostlink.CaptureRequest
	if !decodeCommand(w, r, &req, nil) {
		return
	}
	log := h.log.With("job_id", id, "image_id", req.ImageID, "snapshot_id", req.SnapshotID)
	resp, err := h.snaps.Capture(r.Context(), log, id, req)
	if err != nil {
		log.Warn("image capture failed", "err", err)
		h.writeErr(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// proxyGuest forwards the rest of the path to the machine's guest daemon
// (guestproxy.go). Each request counts as activity of the session while
// it lasts.
func (h *api) proxyGuest(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	epoch, ok := headerEpoch(w, r, -1)
	if !ok {
		return
	}
	rest := "/" + r.PathValue("rest")
	switch rest {
	case guestapi.PathFiles, guestapi.PathFileList, guestapi.PathFileStat: // refused before it counts as activity
		p := r.URL.Query().Get("path")
		if err := guestapi.CheckFilePath(p); err != nil {
			hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, guestapi.FilePathError(p, err))
			return
		}
	}
	mc, err := h.life.guestMachine(sid, epoch)
	if err != nil {
		h.writeErr(w, sid, err)
		return
	}
	done := mc.Active()
	defer done()
	log := h.log.With("session_id", sid)
	if r.Method == http.MethodPost && rest == guestapi.PathExecRun {
		relayExecRun(w, r, mc, log)
		return
	}
	proxyToGuest(w, r, mc, rest, log, h.bounds)
}
