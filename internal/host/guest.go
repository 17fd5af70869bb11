package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// guestCallLimit bounds one call the agent itself makes to a guest daemon
// (sync flushes every filesystem, so it may take a while).
const guestCallLimit = 2 * time.Minute

// guestCall sends one JSON request to mc's guest daemon and decodes a 2xx
// answer into out (if not nil).
func (a *Agent) guestCall(ctx context.Context, mc *machine, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, guestCallLimit)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode guest %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://guest"+path, body)
	if err != nil {
		return fmt.Errorf("build guest %s %s: %w", method, path, err)
	}
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Transport: mc.transport}).Do(req)
	if err != nil {
		return fmt.Errorf("guest %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb guestapi.ErrorBody
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = string(bytes.TrimSpace(raw))
		}
		return fmt.Errorf("guest %s %s: %s: %s", method, path, resp.Status, eb.Error)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
		return fmt.Errorf("decode guest %s %s answer: %w", method, path, err)
	}
	return nil
}

// deliverOutbox hands outbox items to the session's guest, which applies
// each exactly once and in order, and answers the highest seq applied. An
// empty delivery just reads it.
func (a *Agent) deliverOutbox(w http.ResponseWriter, r *http.Request) {
	sid, ok := sessionFrom(w, r)
	if !ok {
		return
	}
	var req hostlink.OutboxDelivery
	if !decodeCommand(w, r, &req, func() int64 { return req.Epoch }) {
		return
	}
	// The session lock orders deliveries with snapshots: the seq a
	// snapshot reports is exactly what its state has applied.
	unlock := a.locks.lock(sid)
	defer unlock()
	mc, err := a.usableMachine(sid, req.Epoch)
	if err != nil {
		a.writeErr(w, sid, err)
		return
	}
	done := a.active(mc)
	defer done()
	ctx, cancel := a.opContext(r.Context())
	defer cancel()
	var st guestapi.OutboxState
	if len(req.Items) == 0 {
		err = a.guestCall(ctx, mc, http.MethodGet, guestapi.PathOutbox, nil, &st)
	} else {
		apply := guestapi.OutboxApply{Entries: make([]guestapi.OutboxEntry, len(req.Items))}
		for i, it := range req.Items {
			apply.Entries[i] = guestapi.OutboxEntry{Seq: it.Seq, ID: it.ID, Kind: it.Kind, Payload: it.Payload}
		}
		err = a.guestCall(ctx, mc, http.MethodPost, guestapi.PathOutbox, apply, &st)
	}
	if err != nil {
		a.writeErr(w, sid, failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("deliver outbox to session %s: %w", sid, err)))
		return
	}
	a.log.Debug("outbox delivered", "session_id", sid, "epoch", req.Epoch, "items", len(req.Items), "applied", st.Applied)
	writeJSON(w, http.StatusOK, hostlink.OutboxApplied{Applied: st.Applied})
}
