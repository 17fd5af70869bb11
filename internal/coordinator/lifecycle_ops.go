package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/store"
)

// create places the session, boots its machine and waits for the guest.
// It is safe to run again after a crash: each step checks where it is. A
// host that refuses for capacity sends it back to placement (at most
// maxPlacements times); link or database trouble is retried by reclaiming
// the op; a boot the host reports as failed is final.
func (x *opRun) create(ctx context.Context) error {
	spec, err := Spec(x.s)
	if err != nil {
		return err
	}
	var base *domain.Image // the image's base snapshot, read once for placement and boot
	if spec.ImageID != "" {
		img, err := x.c.imageBase(ctx, spec)
		if errors.Is(err, errImageChanged) || errors.Is(err, store.ErrNotFound) {
			return x.giveUp(ctx, err)
		}
		if err != nil {
			return x.retry(ctx, err)
		}
		base = &img
	}
	var bundle json.RawMessage // the harness bundle's manifest, attached at boot
	if spec.HarnessID != "" {
		h, err := x.c.sessionHarness(ctx, spec)
		if errors.Is(err, store.ErrNotFound) {
			return x.giveUp(ctx, err)
		}
		if err != nil {
			return x.retry(ctx, err)
		}
		bundle = h.Manifest
	}
	var refused []string // hosts that answered "capacity" in this attempt
	for range maxPlacements {
		if x.s.State == domain.SessionCreated {
			if err := x.placeSession(ctx, spec, base, refused); err != nil {
				return err
			}
		}
		if x.s.State != domain.SessionStarting {
			return nil // already past boot: a retried op has nothing left to do
		}
		err := x.boot(ctx, spec, base, bundle)
		var herr *HostError
		if !errors.As(err, &herr) || herr.Code != "capacity" {
			return err
		}
		refused = append(refused, x.s.HostID)
		if err := x.apply(ctx, lifecycle.Requeue, ptr(""), nil); err != nil {
			return err
		}
	}
	return x.giveUp(ctx, fmt.Errorf("%d hosts refused it for capacity", maxPlacements))
}

// maxPlacements bounds how often one create op re-places a session.
const maxPlacements = 3

func (x *opRun) placeSession(ctx context.Context, spec domain.SessionSpec, base *domain.Image, exclude []string) error {
	if err := x.step(ctx, "place"); err != nil {
		return err
	}
	p := placement{spec: spec, exclude: exclude, harness: spec.HarnessID != ""}
	if base != nil {
		p.snapshot = &domain.Snapshot{ID: base.BaseID, Facts: base.Facts}
	}
	hostID, err := x.c.placeWithin(ctx, p, x.c.cfg.PlacementWait)
	switch {
	case errors.Is(err, scheduler.ErrNoCapacity):
		if ferr := x.apply(ctx, lifecycle.Unplaceable, nil, ptr(err.Error())); ferr != nil {
			return ferr
		}
		return err
	case err != nil:
		return x.retry(ctx, err)
	}
	return x.apply(ctx, lifecycle.Place, &hostID, nil)
}

// boot asks the session's host to start its machine: boot it, or restore
// base (an image's base snapshot) into it.
func (x *opRun) boot(ctx context.Context, spec domain.SessionSpec, base *domain.Image, bundle json.RawMessage) error {
	if err := x.step(ctx, "boot"); err != nil {
		return err
	}
	req := hostlink.StartRequest{Epoch: x.op.Epoch, Spec: spec, Harness: bundle}
	if base != nil {
		req.Restore = &hostlink.RestoreSpec{SnapshotID: base.BaseID, Manifests: base.Manifests, Base: true}
	}
	var st hostlink.MachineStatus
	err := x.c.hostCall(ctx, x.s.HostID, "PUT", "/v1/machines/"+x.s.ID, x.op.Epoch, req, &st)
	var herr *HostError
	switch {
	case err == nil:
		return x.apply(ctx, lifecycle.Started, nil, nil)
	case errors.Is(err, store.ErrStaleEpoch):
		return fmt.Errorf("start on host %s: %w", x.s.HostID, errFenced)
	case errors.As(err, &herr) && herr.Code == "capacity":
		return err
	case errors.As(err, &herr):
		reason := fmt.Sprintf("boot on host %s failed: %v", x.s.HostID, err)
		if ferr := x.apply(ctx, lifecycle.StartFailed, nil, &reason); ferr != nil {
			return ferr
		}
		return errors.New(reason)
	default:
		return x.retry(ctx, fmt.Errorf("start on host %s: %w", x.s.HostID, err))
	}
}

// retry returns err as transient, or on the last attempt ends the session
// with the reason.
func (x *opRun) retry(ctx context.Context, err error) error {
	if !x.lastAttempt() {
		return transient(err)
	}
	return x.giveUp(ctx, err)
}

// giveUp ends a session that cannot be created.
func (x *opRun) giveUp(ctx context.Context, cause error) error {
	reason := fmt.Sprintf("gave up after %d attempts: %v", x.op.Attempts, cause)
	ev := lifecycle.StartFailed
	if x.s.State == domain.SessionCreated {
		ev = lifecycle.Unplaceable
	}
	if err := x.apply(ctx, ev, nil, &reason); err != nil {
		return err
	}
	return errors.New(reason)
}

// destroy deletes the session, destroying its machine if it has one.
func (x *opRun) destroy(ctx context.Context) error {
	if x.s.State.Terminal() {
		return nil
	}
	if x.s.State != domain.SessionDeleting {
		if err := x.apply(ctx, lifecycle.DeleteRequested, nil, nil); err != nil {
			return err
		}
	}
	if x.s.State != domain.SessionDeleting {
		return nil // it had no machine
	}
	if err := x.destroyMachine(ctx); err != nil {
		return err
	}
	return x.apply(ctx, lifecycle.Destroyed, nil, nil)
}

// expire ends a session past its hard time limit: Dead with the reason,
// its machine (if any) destroyed first. One being deleted ends as deleted.
func (x *opRun) expire(ctx context.Context) error {
	if x.s.State.Terminal() {
		return nil
	}
	if x.s.State == domain.SessionDeleting {
		return x.destroy(ctx)
	}
	reason := fmt.Sprintf("its hard time limit of %s passed (max_lifetime_s)", x.c.maxLifetime(x.s))
	if err := x.apply(ctx, lifecycle.TimeLimit, nil, &reason); err != nil {
		return err
	}
	if x.s.State != domain.SessionDeleting {
		return nil // it had no machine: Dead already
	}
	if err := x.destroyMachine(ctx); err != nil {
		return err
	}
	return x.apply(ctx, lifecycle.Expired, nil, &reason)
}

// destroyMachine destroys the session's machine on its host. A host that
// cannot be reached destroys it when it reconciles (it no longer owns it).
func (x *opRun) destroyMachine(ctx context.Context) error {
	if err := x.step(ctx, "destroy"); err != nil {
		return err
	}
	err := x.c.hostCall(ctx, x.s.HostID, "DELETE", "/v1/machines/"+x.s.ID, x.op.Epoch, nil, nil)
	var herr *HostError
	switch {
	case errors.Is(err, store.ErrStaleEpoch):
		return fmt.Errorf("destroy on host %s: %w", x.s.HostID, errFenced)
	case err != nil && !errors.As(err, &herr) && !errors.Is(err, hostlink.ErrHostNotConnected) && !x.lastAttempt():
		return transient(fmt.Errorf("destroy on host %s: %w", x.s.HostID, err))
	case err != nil:
		// The host destroys every machine it no longer owns when it next
		// heartbeats or reconnects, so completing here leaks nothing.
		x.log.Warn("destroy failed; host will reap it on reconciliation", "host_id", x.s.HostID, "err", err)
	}
	return nil
}

// recoverLost handles a session whose host stopped heartbeating or whose
// machine exited: back to Idle at its last committed snapshot (commands
// applied after it are delivered again), or Dead without one.
func (x *opRun) recoverLost(ctx context.Context) error {
	if !x.s.State.HasVM() && x.s.State != domain.SessionHostLost {
		return nil
	}
	hostID := x.s.HostID
	if x.s.State != domain.SessionHostLost {
		if err := x.apply(ctx, lifecycle.HeartbeatLost, nil, nil); err != nil {
			return err
		}
	}
	if x.s.State != domain.SessionHostLost {
		return nil
	}
	if x.s.HeadSnapshotID == "" {
		reason := fmt.Sprintf("its machine on host %s is gone (host lost or machine exited) and the session had no snapshot", hostID)
		return x.apply(ctx, lifecycle.NotRecoverable, nil, &reason)
	}
	if err := x.rollbackOutbox(ctx); err != nil {
		return err
	}
	reason := fmt.Sprintf("machine on host %s was lost; resumes from snapshot %s", hostID, x.s.HeadSnapshotID)
	return x.apply(ctx, lifecycle.Recovered, ptr(""), &reason)
}

// placeWithin retries placement until a host fits or the wait runs out.
// placement is what a session needs from a host: room, and for a resume a
// host able to restore its snapshot (preferably one caching it).
type placement struct {
	spec     domain.SessionSpec
	exclude  []string
	snapshot *domain.Snapshot
	rootfs   bool // only hosts whose backend boots an image's root filesystem
	harness  bool // only hosts whose backend attaches harness bundles
}

func (c *Coordinator) placeWithin(ctx context.Context, p placement, wait time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	for {
		id, err := c.place(ctx, p)
		if err == nil || !errors.Is(err, scheduler.ErrNoCapacity) {
			return id, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Coordinator) place(ctx context.Context, p placement) (string, error) {
	hosts, err := c.st.ListHosts(ctx)
	if err != nil {
		return "", fmt.Errorf("place: list hosts: %w", err)
	}
	placed, err := c.st.ListSessions(ctx, domain.SessionFilter{States: vmStates()})
	if err != nil {
		return "", fmt.Errorf("place: list sessions: %w", err)
	}
	byHost := map[string]*scheduler.Candidate{}
	cands := make([]scheduler.Candidate, 0, len(hosts))
	var snapFacts hostlink.Facts
	if p.snapshot != nil {
		if err := json.Unmarshal(p.snapshot.Facts, &snapFacts); err != nil {
			return "", fmt.Errorf("place: facts of snapshot %s: %w", p.snapshot.ID, err)
		}
	}
	for _, h := range hosts {
		var capa hostlink.Capacity
		if len(h.Capacity) > 0 {
			if err := json.Unmarshal(h.Capacity, &capa); err != nil {
				c.log.Warn("host capacity unreadable", "host_id", h.ID, "err", err)
			}
		}
		cd := scheduler.Candidate{
			HostID: h.ID, Ready: h.State == domain.HostReady && !slices.Contains(p.exclude, h.ID) && c.fresh(h),
			MemoryMiB: capa.MemoryMiB, VCPUs: capa.VCPUs, MaxSessions: capa.MaxSessions,
		}
		var hf hostlink.Facts
		_ = json.Unmarshal(h.Facts, &hf)
		if p.snapshot != nil {
			cd.Incompatible = scheduler.Compatible(snapFacts, hf)
			cd.Cached = slices.Contains(capa.CachedSnapshots, p.snapshot.ID)
		}
		if p.rootfs && !hf.Backend.RootFS && cd.Incompatible == "" {
			cd.Incompatible = fmt.Sprintf("backend %s cannot boot an image's root filesystem", hf.Backend.Name)
		}
		if p.harness && !hf.Backend.Harness && cd.Incompatible == "" {
			cd.Incompatible = fmt.Sprintf("backend %s cannot attach a harness bundle", hf.Backend.Name)
		}
		cands = append(cands, cd)
	}
	for i := range cands {
		byHost[cands[i].HostID] = &cands[i]
	}
	for _, s := range placed {
		cd := byHost[s.HostID]
		if cd == nil {
			continue
		}
		sp, err := Spec(s)
		if err != nil {
			continue
		}
		cd.PlacedMemoryMiB += sp.MemoryMiB
		cd.PlacedVCPUs += sp.VCPUs
		cd.PlacedSessions++
	}
	return scheduler.Place(cands, scheduler.Request{MemoryMiB: p.spec.MemoryMiB, VCPUs: p.spec.VCPUs})
}

// vmStates are the states in which a session may own a machine.
func vmStates() []domain.SessionState {
	var out []domain.SessionState
	for _, s := range domain.SessionStates {
		if s.HasVM() {
			out = append(out, s)
		}
	}
	return out
}

// fresh reports whether a host heartbeated recently enough to take work:
// one that missed a few heartbeats is probably gone, even before the
// monitor may declare it lost.
func (c *Coordinator) fresh(h domain.Host) bool {
	return c.now().Sub(h.LastHeartbeat) < 3*c.cfg.HeartbeatInterval+time.Second
}
