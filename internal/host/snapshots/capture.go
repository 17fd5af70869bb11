package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Image captures: a machine booted from an image's root filesystem, warmed
// up, snapshotted into chunks and destroyed. It belongs to no session, so
// it lives under DataDir/image-captures/<job id>, which an agent restart
// clears (the coordinator retries the job).
const (
	captureDir    = "image-captures"
	capturePrefix = "capture-"
)

// Capture boots req's root filesystem, runs the warm-up and uploads the
// base snapshot of capture job id. Nothing of the machine is left when it
// returns.
func (s *Snapshots) Capture(ctx context.Context, log *slog.Logger, id string, req hostlink.CaptureRequest) (hostlink.CaptureResponse, error) {
	var resp hostlink.CaptureResponse
	rootfsMan, err := s.checkCapture(req)
	if err != nil {
		return resp, err
	}
	unlock := s.captureLocks.Lock(capturePrefix + id)
	defer unlock()
	name := capturePrefix + id
	spec := hostlink.MachineSpec{MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs}
	if err := s.deps.Capacity.Reserve(name, spec); err != nil {
		return resp, failure.New(http.StatusConflict, hostlink.CodeCapacity, err)
	}
	defer s.deps.Capacity.Unreserve(name)
	ctx, cancel := s.deps.Lease.OpContext(ctx)
	defer cancel()
	stages := map[string]int64{}
	mark := stageTimer(s.deps.Now, stages)
	rootfs, err := s.shared.disk(ctx, hostlink.RoleRootFS, rootfsMan)
	if err != nil {
		return resp, err
	}
	mark("fetch_rootfs")
	m, dir, cleanup, err := s.bootCapture(ctx, log, id, name, req, rootfs)
	if err != nil {
		return resp, err
	}
	defer cleanup()
	mark("boot")
	gc := guestapi.NewClient(m.Dial)
	defer gc.Close()
	tail, err := runWarmup(ctx, gc, req)
	if errors.Is(err, errWarmup) {
		return resp, &failure.Error{Status: http.StatusUnprocessableEntity, Code: hostlink.CodeWarmupFailed, Err: err, Tail: tail}
	}
	if err != nil { // this host's trouble (lease, shutdown, guest channel): another host may do
		return resp, failure.New(http.StatusServiceUnavailable, hostlink.CodeUnavailable, err)
	}
	mark("warmup")
	manifests, put, err := s.baseSnapshot(ctx, m, gc, filepath.Join(dir, "snapshot"), mark)
	if err != nil {
		return resp, err
	}
	// Put the root filesystem's chunks again: a capture may outlast the GC
	// grace given to the chunks the coordinator uploaded.
	if err := s.shared.put(ctx, hostlink.RoleRootFS, rootfsMan); err != nil {
		return resp, failure.New(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed, err)
	}
	s.cached.remember(req.SnapshotID, manifests)
	rootfsMan.Role = hostlink.RoleRootFS
	manifests[hostlink.RoleRootFS] = rootfsMan
	if resp.Manifests, err = json.Marshal(manifests); err != nil {
		return resp, err
	}
	resp.SnapshotID, resp.Facts, resp.Bytes, resp.Uploaded = req.SnapshotID, s.deps.Facts(), put.Bytes, put.StoredBytes
	resp.OutputTail, resp.StagesMS = tail, stages
	log.Info("image captured", "stages_ms", stages, "bytes", put.Bytes, "uploaded", put.StoredBytes)
	return resp, nil
}

// checkCapture refuses a capture this host cannot run now and decodes its
// root filesystem manifest.
func (s *Snapshots) checkCapture(req hostlink.CaptureRequest) (chunk.Manifest, error) {
	switch {
	case !hostfs.ValidName(req.SnapshotID):
		return chunk.Manifest{}, failure.New(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("bad snapshot id %q", req.SnapshotID))
	case s.deps.DiskChunks == nil:
		return chunk.Manifest{}, failure.New(http.StatusNotImplemented, hostlink.CodeUnsupported, errors.New("this host has no chunk store configured"))
	case s.deps.Lease.Expired():
		return chunk.Manifest{}, failure.New(http.StatusServiceUnavailable, hostlink.CodePaused, s.deps.Lease.Err())
	}
	m, err := chunk.Decode(req.RootFS)
	if err != nil {
		return chunk.Manifest{}, failure.New(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("root filesystem manifest: %w", err))
	}
	return m, nil
}

// bootCapture boots the capture machine name in a fresh capture dir.
// cleanup destroys the machine, then removes the dir.
func (s *Snapshots) bootCapture(ctx context.Context, log *slog.Logger, id, name string, req hostlink.CaptureRequest, rootfs *vmm.RootFS) (m vmm.Machine, dir string, cleanup func(), err error) {
	dir = filepath.Join(s.cfg.DataDir, captureDir, id)
	if err := os.RemoveAll(dir); err != nil {
		return nil, "", nil, fmt.Errorf("clear capture dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", nil, fmt.Errorf("create capture dir: %w", err)
	}
	removeDir := func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove capture dir", "err", err)
		}
	}
	m, err = s.deps.Backend.Boot(ctx, vmm.Spec{SessionID: name, Dir: dir, MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, Env: req.Env, RootFS: rootfs})
	if err != nil {
		removeDir()
		return nil, "", nil, failure.New(http.StatusUnprocessableEntity, hostlink.CodeBootFailed, fmt.Errorf("boot the image: %w", err))
	}
	return m, dir, func() {
		if err := m.Destroy(context.WithoutCancel(ctx)); err != nil {
			log.Warn("destroy capture machine", "err", err)
		}
		removeDir()
	}, nil
}

// baseSnapshot quiesces the warmed machine m, snapshots it into dir and
// uploads its chunks.
func (s *Snapshots) baseSnapshot(ctx context.Context, m vmm.Machine, gc *guestapi.Client, dir string, mark func(string)) (map[string]chunk.Manifest, chunk.PutStats, error) {
	if err := gc.Sync(ctx); err != nil {
		return nil, chunk.PutStats{}, failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("quiesce the warmed guest: %w", err))
	}
	snap, err := m.Snapshot(ctx, dir)
	if err != nil {
		return nil, chunk.PutStats{}, failure.New(http.StatusInternalServerError, hostlink.CodeSnapshotFailed, fmt.Errorf("snapshot the warmed machine: %w", err))
	}
	mark("snapshot")
	manifests, put, err := s.upload(ctx, snap, chunk.Manifest{}, nil)
	if err != nil {
		return nil, put, failure.New(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed, fmt.Errorf("upload the base snapshot: %w", err))
	}
	mark("upload")
	return manifests, put, nil
}

// stageTimer returns mark(name): the time since the previous mark is
// recorded as stage name.
func stageTimer(now func() time.Time, stages map[string]int64) func(string) {
	last := now()
	return func(name string) {
		t := now()
		stages[name] = t.Sub(last).Milliseconds()
		last = t
	}
}

// ClearCaptures destroys what image captures a previous agent left (the
// coordinator retries their jobs) and removes their dirs.
func (s *Snapshots) ClearCaptures(ctx context.Context) {
	root := filepath.Join(s.cfg.DataDir, captureDir)
	ents, err := os.ReadDir(root)
	if err != nil {
		return
	}
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		m, err := s.deps.Backend.Recover(ctx, dir)
		switch {
		case err == nil:
			if derr := m.Destroy(ctx); derr != nil {
				s.log.Warn("destroy leftover capture machine", "dir", dir, "err", derr)
				continue
			}
		case !errors.Is(err, vmm.ErrGone):
			s.log.Warn("leftover capture machine not recovered", "dir", dir, "err", err)
		}
		if err := os.RemoveAll(dir); err != nil {
			s.log.Warn("remove leftover capture dir", "dir", dir, "err", err)
		}
	}
}
