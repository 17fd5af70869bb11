package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/access"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// ErrUnauthorized is returned for a credential that is unknown, revoked or
// of the wrong kind.
var ErrUnauthorized = errors.New("unauthorized")

// HashToken is how token secrets are stored: hex SHA-256.
func HashToken(secret string) string { return access.HashSecret(secret) }

// RouteHostLink adds what hosts send over their link about their own
// lifecycle to mux: register and heartbeat, and guest bound reports. The host id comes from the
// authenticated link (hostlink.HostIDFrom).
func (c *Coordinator) RouteHostLink(mux *http.ServeMux) {
	h := &linkHandlers{c}
	mux.HandleFunc("POST "+hostlink.PathRegister, h.handleRegister)
	mux.HandleFunc("POST "+hostlink.PathHeartbeat, h.handleHeartbeat)
	mux.HandleFunc("POST "+hostlink.PathGuestBound, h.handleGuestBound)
}

// linkHandlers answer what hosts send about themselves over their link.
type linkHandlers struct{ *Coordinator }

func (c *linkHandlers) handleRegister(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	var req hostlink.RegisterRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode register request: "+err.Error())
		return
	}
	if !c.linkAllowed(w, r, hostID) {
		return
	}
	old, err := c.st.GetHost(r.Context(), hostID)
	if err != nil {
		hostlink.WriteError(w, http.StatusNotFound, hostlink.CodeNotFound, fmt.Sprintf("host %s is not registered: %v", hostID, err))
		return
	}
	req.Capacity.CachedSnapshots = req.Snapshots
	now := c.now()
	err = c.st.RegisterHost(r.Context(), domain.Host{
		ID: hostID, Name: old.Name, Facts: req.Facts, Capacity: req.Capacity,
		ReplicaID: c.cfg.ReplicaID, ReplicaAddr: c.cfg.ReplicaAddr,
		ProtocolVersion: hostlink.Version, LastHeartbeat: now, ConnectedAt: now,
	})
	if errors.Is(err, store.ErrConflict) && !c.linkAllowed(w, r, hostID) {
		return // disabled, deleted or revoked since the check
	}
	if err != nil {
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, "register host: "+err.Error())
		return
	}
	sessions, err := c.ownedSessions(r.Context(), hostID)
	if err != nil {
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, err.Error())
		return
	}
	owned := ownership(sessions)
	c.recoverMissing(r.Context(), hostID, req.Machines, sessions)
	c.log.Info("host registered", "host_id", hostID, "machines", len(req.Machines), "owned", len(owned))
	c.wake(r.Context(), TopicOps) // sessions waiting for capacity may now place
	writeLinkJSON(w, hostlink.RegisterResponse{HostID: string(hostID), Owned: owned, HeartbeatInterval: c.cfg.HeartbeatInterval, Lease: c.lease()})
}

func (c *linkHandlers) handleHeartbeat(w http.ResponseWriter, r *http.Request) {
	hostID, _ := hostlink.HostIDFrom(r.Context())
	var req hostlink.HeartbeatRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "decode heartbeat: "+err.Error())
		return
	}
	if !c.linkAllowed(w, r, hostID) {
		return
	}
	req.Capacity.CachedSnapshots = req.Snapshots
	state, err := c.st.HostHeartbeat(r.Context(), hostID, &req.Capacity, c.now())
	if err != nil {
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, "heartbeat: "+err.Error())
		return
	}
	if state == domain.HostLost {
		// Its sessions were already handed to recovery; the host itself may
		// take new work again (unless an admin drains it meanwhile).
		if _, err := c.st.ReviveHost(r.Context(), hostID); err != nil {
			c.log.Warn("revive returning host", "host_id", hostID, "err", err)
		}
	}
	sessions, err := c.ownedSessions(r.Context(), hostID)
	if err != nil {
		hostlink.WriteError(w, http.StatusInternalServerError, hostlink.CodeInternal, err.Error())
		return
	}
	owned := ownership(sessions)
	c.recoverExited(r.Context(), hostID, req.Machines, sessions)
	c.recordActivity(r.Context(), req.Machines, sessions)
	resp := hostlink.HeartbeatResponse{Owned: owned, Lease: c.lease()}
	if c.images != nil {
		resp.Prefetch = c.images.PrefetchFor(r.Context(), hostID, req.Snapshots)
	}
	writeLinkJSON(w, resp)
}

// linkAllowed re-checks the link a request came over and answers the
// request itself (refusing it and closing the link) unless the link may
// still hold the host.
func (c *linkHandlers) linkAllowed(w http.ResponseWriter, r *http.Request, hostID domain.HostID) bool {
	ref, err := c.access.checkLink(r.Context(), hostID)
	if err != nil {
		hostlink.WriteError(w, http.StatusServiceUnavailable, hostlink.CodeUnavailable, err.Error())
		return false
	}
	if ref != nil {
		c.access.refuseLink(w, r, hostID, ref)
		return false
	}
	return true
}

func (c *linkHandlers) ownedSessions(ctx context.Context, hostID domain.HostID) ([]domain.Session, error) {
	ss, err := c.st.ListSessions(ctx, domain.SessionFilter{HostID: hostID, States: domain.VMStates()})
	if err != nil {
		return nil, fmt.Errorf("list sessions of host %s: %w", hostID, err)
	}
	return ss, nil
}

func ownership(ss []domain.Session) []hostlink.Ownership {
	out := make([]hostlink.Ownership, 0, len(ss))
	for _, s := range ss {
		out = append(out, hostlink.Ownership{SessionID: string(s.ID), Epoch: s.Epoch})
	}
	return out
}

// recordActivity moves sessions' idle clocks forward from what the host saw
// (guest requests through it), writing only when it moved by a second.
func (c *linkHandlers) recordActivity(ctx context.Context, ms []hostlink.MachineStatus, ss []domain.Session) {
	last := make(map[domain.SessionID]time.Time, len(ss))
	for _, s := range ss {
		last[s.ID] = s.LastActivity
	}
	for _, m := range ms {
		prev, ok := last[domain.SessionID(m.SessionID)]
		if !ok || m.LastActivity.Sub(prev) < time.Second {
			continue
		}
		if err := c.st.TouchSession(ctx, domain.SessionID(m.SessionID), m.LastActivity); err != nil {
			c.log.Warn("record activity", "session_id", m.SessionID, "err", err)
		}
	}
}

func writeLinkJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// lease is how long a host keeps its machines running without a successful
// heartbeat: well inside HostLostAfter, so a cut-off host has paused its
// machines before any replica may declare it lost and move its sessions.
func (c *Coordinator) lease() time.Duration { return c.cfg.Lease() }

// recoverExited hands Active sessions whose machine the host reports
// exited (at the epoch the coordinator knows) to recovery. Other states are
// left to their op: a suspend or delete destroys the machine on purpose.
func (c *linkHandlers) recoverExited(ctx context.Context, hostID domain.HostID, ms []hostlink.MachineStatus, ss []domain.Session) {
	active := make(map[domain.SessionID]int64, len(ss))
	for _, s := range ss {
		if s.State == domain.SessionActive {
			active[s.ID] = s.Epoch
		}
	}
	for _, m := range ms {
		e, ok := active[domain.SessionID(m.SessionID)]
		if m.State != "exited" || !ok || m.Epoch != e {
			continue
		}
		c.log.Warn("machine exited on its own", "host_id", hostID, "session_id", m.SessionID, "epoch", m.Epoch)
		if err := c.enqueueRecover(ctx, domain.SessionID(m.SessionID), fmt.Sprintf("exited:%s:%d", hostID, m.Epoch)); err != nil {
			c.log.Error("recover exited machine", "session_id", m.SessionID, "err", err)
			continue
		}
		c.wake(ctx, TopicOps)
	}
}

// recoverMissing hands to recovery every session the host should run but
// did not report when it registered (it restarted and its machines are
// gone). Sessions whose op may be creating the machine right now (starting,
// resuming: the coordinator can reach the host over the new link before
// its registration is read) are left to that op, which retries on the new
// link; deleting ones to their destroy op; suspending ones to their evict
// op (the machine may be gone because its snapshot was uploaded: the
// retried capture gets that snapshot again, or not_found and recovers).
func (c *linkHandlers) recoverMissing(ctx context.Context, hostID domain.HostID, ms []hostlink.MachineStatus, ss []domain.Session) {
	has := make(map[domain.SessionID]bool, len(ms))
	for _, m := range ms {
		has[domain.SessionID(m.SessionID)] = m.State != "exited"
	}
	for _, s := range ss {
		if has[s.ID] || s.State == domain.SessionStarting || s.State == domain.SessionResuming || s.State == domain.SessionDeleting ||
			s.State == domain.SessionSuspending {
			continue
		}
		c.log.Warn("host registered without a machine it owns", "host_id", hostID, "session_id", s.ID, "state", s.State)
		if err := c.enqueueRecover(ctx, s.ID, fmt.Sprintf("missing:%s:%d", hostID, s.Epoch)); err != nil {
			c.log.Error("recover missing machine", "session_id", s.ID, "err", err)
			continue
		}
		c.wake(ctx, TopicOps)
	}
}
