package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/lifecycle"
	"github.com/engrams/engrams/internal/scheduler"
)

// create places the session, boots its machine and waits for the guest.
// It is safe to run again after a crash: each step checks where it is. A
// host that refuses for capacity sends it back to placement (at most
// maxPlacements times); link or database trouble is retried by reclaiming
// the op; a boot the host reports as failed is final.
func (x *opRun) create(ctx context.Context) error {
	spec := x.s.Spec
	var base *domain.Image // the image's base snapshot, read once for placement and boot
	if spec.ImageID != "" {
		img, err := x.imageBase(ctx, spec)
		if errors.Is(err, domain.ErrConflict) || errors.Is(err, domain.ErrNotFound) {
			return x.giveUp(ctx, err)
		}
		if err != nil {
			return x.retry(ctx, err)
		}
		base = &img
	}
	var bundle json.RawMessage // the harness bundle's manifest, attached at boot
	if spec.HarnessID != "" {
		h, err := x.harnessBundle(ctx, spec)
		if errors.Is(err, domain.ErrNotFound) {
			return x.giveUp(ctx, err)
		}
		if err != nil {
			return x.retry(ctx, err)
		}
		bundle = h.Manifest
	}
	var refused []domain.HostID // hosts that answered "capacity" in this attempt
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
		if !errors.Is(err, hostlink.ErrNoCapacity) {
			return err
		}
		refused = append(refused, x.s.HostID)
		if err := x.apply(ctx, lifecycle.Requeue, ptr[domain.HostID](""), nil); err != nil {
			return err
		}
	}
	return x.hostsRefused(ctx)
}

// hostsRefused handles a create every host it was placed on refused for
// capacity (their own count disagreed with the coordinator's): it waits
// in the queue, and past the deadline is refused for room like any other.
func (x *opRun) hostsRefused(ctx context.Context) error {
	refusal := fmt.Errorf("%d hosts refused it for capacity", maxPlacements)
	if x.c.now().Before(x.op.CreatedAt.Add(x.c.cfg.QueueWait)) {
		return x.queue(ctx, refusal, true)
	}
	if err := x.step(ctx, stepNoRoom); err != nil {
		return err
	}
	x.c.met.PlacementRefused(string(x.op.Kind))
	return x.refuseCreate(ctx, &domain.RoomError{Why: refusal.Error(), RetryAfter: defaultRetryAfter})
}

// refuseCreate ends a created session no host had room for: Completed,
// never started (no_room), with the refusal as its reason.
func (x *opRun) refuseCreate(ctx context.Context, room *domain.RoomError) error {
	reason := "not started: " + room.Error()
	if err := x.applyDesired(ctx, lifecycle.NoRoom, nil, &reason, ptr(domain.DesireDeleted)); err != nil {
		return err
	}
	return room
}

// imageBase reads the image the session was created from.
func (x *opRun) imageBase(ctx context.Context, spec domain.SessionSpec) (domain.Image, error) {
	if x.c.images == nil {
		return domain.Image{}, fmt.Errorf("image %s of the session: this server has no images: %w", spec.Image, domain.ErrNotFound)
	}
	return x.c.images.Base(ctx, spec)
}

// harnessBundle reads the harness bundle the session was created with.
func (x *opRun) harnessBundle(ctx context.Context, spec domain.SessionSpec) (domain.Harness, error) {
	if x.c.harns == nil {
		return domain.Harness{}, fmt.Errorf("harness %s of the session: this server has no harness registry: %w", spec.Harness, domain.ErrNotFound)
	}
	return x.c.harns.Bundle(ctx, spec)
}

// maxPlacements bounds how often one create op re-places a session.
const maxPlacements = 3

// placeSession places a created session on a host, waiting in the queue
// for room (errQueued) while every host is full. One refused for room ends
// Completed, never started (no_room); one no host could ever run ends Dead.
func (x *opRun) placeSession(ctx context.Context, spec domain.SessionSpec, base *domain.Image, exclude []domain.HostID) error {
	if x.op.Step != stepQueued {
		if err := x.step(ctx, "place"); err != nil {
			return err
		}
	}
	need := scheduler.Need{Exclude: exclude, Harness: spec.HarnessID != ""}
	if base != nil {
		need.Snapshot = &scheduler.SnapshotNeed{ID: base.BaseID, Facts: base.Facts}
	}
	hostID, err := x.placeOrQueue(ctx, spec, need)
	var room *domain.RoomError
	switch {
	case errors.Is(err, errQueued):
		return err
	case errors.As(err, &room):
		return x.refuseCreate(ctx, room)
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
	req := hostlink.StartRequest{Epoch: x.op.Epoch, Spec: hostlink.MachineSpecOf(spec), Harness: bundle}
	if base != nil {
		req.Restore = &hostlink.RestoreSpec{SnapshotID: string(base.BaseID), Manifests: base.Manifests, Base: true}
	}
	_, err := x.c.links.Start(ctx, x.s.HostID, x.s.ID, req)
	var herr *hostlink.HostError
	switch {
	case err == nil:
		return x.apply(ctx, lifecycle.Started, nil, nil)
	case errors.Is(err, hostlink.ErrStaleEpoch):
		return fmt.Errorf("start on host %s: %w", x.s.HostID, errFenced)
	case errors.Is(err, hostlink.ErrNoCapacity):
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
	err := x.c.links.Destroy(ctx, x.s.HostID, x.s.ID, x.op.Epoch)
	var herr *hostlink.HostError
	switch {
	case errors.Is(err, hostlink.ErrStaleEpoch):
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
	return x.apply(ctx, lifecycle.Recovered, ptr[domain.HostID](""), &reason)
}
