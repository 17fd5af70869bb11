package host

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/hostlink"
)

// A snapshot that destroys its machine (a suspend) leaves nothing here to
// capture again. If the coordinator dies after the upload and before it
// commits the snapshot, its retried command (same snapshot id: the op's)
// would find no machine, and the session would go back to its previous
// snapshot, losing what the machine did since. So the answer of such a
// capture is kept on disk (captures/<session id>.json) until the
// coordinator no longer lists the session as owned or a machine starts for
// it, and a retry that finds no machine gets it again.

const capturesDir = "captures"

// keptCapture is the answer of a capture that destroyed its machine.
type keptCapture struct {
	SnapshotID string          `json:"snapshot_id"`
	Answer     json.RawMessage `json:"answer"` // the SnapshotResponse as sent
}

// snapshotCommand serves POST …/snapshot: a retried capture whose machine
// this host already destroyed gets the kept answer; any other goes to
// snapshotMachine, and the answer of one that destroyed the machine is
// kept before it is sent.
func (a *Agent) snapshotCommand(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxCommandBody))
	if err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "read request: "+err.Error())
		return
	}
	var req hostlink.SnapshotRequest
	destroy := json.Unmarshal(body, &req) == nil && req.Destroy
	if destroy && a.answerKept(w, r, sid, req) {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !destroy {
		a.snapshotMachine(w, r)
		return
	}
	held := &heldAnswer{header: http.Header{}, status: http.StatusOK}
	a.snapshotMachine(held, r)
	if held.status == http.StatusOK {
		rec, err := json.Marshal(keptCapture{SnapshotID: req.SnapshotID, Answer: held.body.Bytes()})
		if err == nil {
			err = writeFileSync(filepath.Join(a.cfg.DataDir, capturesDir), sid+".json", rec)
		}
		if err != nil {
			a.log.Warn("keep the answer of a capture that destroyed its machine", "session_id", sid, "error", err)
		}
	}
	held.send(w)
}

// answerKept answers req with the kept capture of the same snapshot id if
// the session has no machine here, and reports whether it answered.
func (a *Agent) answerKept(w http.ResponseWriter, r *http.Request, sid string, req hostlink.SnapshotRequest) bool {
	if r.Header.Get(hostlink.HeaderEpoch) != strconv.FormatInt(req.Epoch, 10) {
		return false // snapshotMachine explains the mismatch
	}
	unlock := a.locks.lock(sid)
	defer unlock()
	b, err := os.ReadFile(filepath.Join(a.cfg.DataDir, capturesDir, sid+".json"))
	var kept keptCapture
	if err != nil || json.Unmarshal(b, &kept) != nil || kept.SnapshotID != req.SnapshotID {
		return false
	}
	a.mu.Lock()
	mc := a.machines[sid]
	a.mu.Unlock()
	if mc != nil {
		return false
	}
	if err := a.fence(sid, req.Epoch); err != nil {
		a.writeErr(w, sid, err)
		return true
	}
	a.log.Info("retried capture: answering with the one that destroyed the machine", "session_id", sid,
		"epoch", req.Epoch, "snapshot_id", req.SnapshotID)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(kept.Answer)
	return true
}

// forgetCapture drops sid's kept capture: a machine starts for it.
func (a *Agent) forgetCapture(sid string) {
	err := os.Remove(filepath.Join(a.cfg.DataDir, capturesDir, sid+".json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		a.log.Warn("drop a kept capture", "session_id", sid, "error", err)
	}
}

// pruneCaptures drops the kept captures of sessions not in owned.
func (a *Agent) pruneCaptures(owned map[string]int64) {
	ents, err := os.ReadDir(filepath.Join(a.cfg.DataDir, capturesDir))
	if err != nil {
		return
	}
	for _, e := range ents {
		sid, ok := strings.CutSuffix(e.Name(), ".json")
		if _, own := owned[sid]; ok && !own {
			a.forgetCapture(sid)
		}
	}
}

// heldAnswer holds a handler's answer until it is sent.
type heldAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldAnswer) Header() http.Header         { return h.header }
func (h *heldAnswer) WriteHeader(status int)      { h.status = status }
func (h *heldAnswer) Write(b []byte) (int, error) { return h.body.Write(b) }

func (h *heldAnswer) send(w http.ResponseWriter) {
	maps.Copy(w.Header(), h.header)
	w.WriteHeader(h.status)
	_, _ = w.Write(h.body.Bytes())
}
