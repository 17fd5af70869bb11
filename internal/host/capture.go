package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// Image captures: a machine booted from an image's root filesystem, warmed
// up, snapshotted into chunks and destroyed. It belongs to no session, so
// it lives under DataDir/image-captures/<job id>, which an agent restart
// clears (the coordinator retries the job).
const (
	captureDir     = "image-captures"
	warmupTailMax  = 4 << 10
	capturePrefix  = "capture-"
	warmupSyncWait = 2 * time.Minute
)

// captureCommand serves POST /v1/captures/{id}.
func (a *Agent) captureCommand(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Sprintf("bad capture id %q", id))
		return
	}
	var req hostlink.CaptureRequest
	if !decodeCommand(w, r, &req, nil) {
		return
	}
	log := a.log.With("job_id", id, "image_id", req.ImageID, "snapshot_id", req.SnapshotID)
	resp, err := a.captureImage(r.Context(), log, id, req)
	if err != nil {
		log.Warn("image capture failed", "error", err)
		a.writeErr(w, "", err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// captureImage boots req's root filesystem, runs the warm-up and uploads
// the base snapshot. Nothing of the machine is left when it returns.
func (a *Agent) captureImage(ctx context.Context, log *slog.Logger, id string, req hostlink.CaptureRequest) (hostlink.CaptureResponse, error) {
	var resp hostlink.CaptureResponse
	switch {
	case !validSessionID(req.SnapshotID):
		return resp, failure(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("bad snapshot id %q", req.SnapshotID))
	case a.deps.DiskChunks == nil:
		return resp, failure(http.StatusNotImplemented, hostlink.CodeUnsupported, errors.New("this host has no chunk store configured"))
	case a.leaseExpired():
		return resp, failure(http.StatusServiceUnavailable, hostlink.CodePaused, a.leaseError())
	}
	rootfsMan, err := chunk.Decode(req.RootFS)
	if err != nil {
		return resp, failure(http.StatusBadRequest, hostlink.CodeBadRequest, fmt.Errorf("root filesystem manifest: %w", err))
	}
	unlock := a.imageLocks.lock(capturePrefix + id)
	defer unlock()
	name := capturePrefix + id
	spec := hostlink.MachineSpec{MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs}
	if err := a.reserve(name, spec); err != nil {
		return resp, failure(http.StatusConflict, hostlink.CodeCapacity, err)
	}
	defer a.unreserve(name)
	ctx, cancel := a.opContext(ctx)
	defer cancel()
	stages := map[string]int64{}
	mark := stageTimer(a.deps.Now, stages)
	rootfs, err := a.sharedDisk(ctx, hostlink.RoleRootFS, rootfsMan)
	if err != nil {
		return resp, err
	}
	mark("fetch_rootfs")
	dir := filepath.Join(a.cfg.DataDir, captureDir, id)
	if err := os.RemoveAll(dir); err != nil {
		return resp, fmt.Errorf("clear capture dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return resp, fmt.Errorf("create capture dir: %w", err)
	}
	defer func() {
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("remove capture dir", "error", err)
		}
	}()
	m, err := a.deps.Backend.Boot(ctx, vmm.Spec{SessionID: name, Dir: dir, MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs, Env: req.Env, RootFS: rootfs})
	if err != nil {
		return resp, failure(http.StatusUnprocessableEntity, hostlink.CodeBootFailed, fmt.Errorf("boot the image: %w", err))
	}
	defer func() {
		if err := m.Destroy(context.WithoutCancel(ctx)); err != nil {
			log.Warn("destroy capture machine", "error", err)
		}
	}()
	mark("boot")
	gc := guestapi.NewClient(m.Dial)
	defer gc.Close()
	tail, err := runWarmup(ctx, gc, req)
	if errors.Is(err, errWarmup) {
		return resp, &apiError{status: http.StatusUnprocessableEntity, code: hostlink.CodeWarmupFailed, err: err, tail: tail}
	}
	if err != nil { // this host's trouble (lease, shutdown, guest channel): another host may do
		return resp, failure(http.StatusServiceUnavailable, hostlink.CodeUnavailable, err)
	}
	mark("warmup")
	manifests, put, err := a.baseSnapshot(ctx, m, gc, filepath.Join(dir, "snapshot"), mark)
	if err != nil {
		return resp, err
	}
	// Put the root filesystem's chunks again: a capture may outlast the GC
	// grace given to the chunks the coordinator uploaded.
	if err := a.putShared(ctx, hostlink.RoleRootFS, rootfsMan); err != nil {
		return resp, failure(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed, err)
	}
	a.rememberSnapshot(req.SnapshotID, manifests)
	rootfsMan.Role = hostlink.RoleRootFS
	manifests[hostlink.RoleRootFS] = rootfsMan
	if resp.Manifests, err = json.Marshal(manifests); err != nil {
		return resp, err
	}
	resp.SnapshotID, resp.Facts, resp.Bytes, resp.Uploaded = req.SnapshotID, a.facts(), put.Bytes, put.StoredBytes
	resp.OutputTail, resp.StagesMS = tail, stages
	log.Info("image captured", "stages_ms", stages, "bytes", put.Bytes, "uploaded", put.StoredBytes)
	return resp, nil
}

// baseSnapshot quiesces the warmed machine m, snapshots it into dir and
// uploads its chunks.
func (a *Agent) baseSnapshot(ctx context.Context, m vmm.Machine, gc *guestapi.Client, dir string, mark func(string)) (map[string]chunk.Manifest, chunk.PutStats, error) {
	if err := gc.Sync(ctx); err != nil {
		return nil, chunk.PutStats{}, failure(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("quiesce the warmed guest: %w", err))
	}
	snap, err := m.Snapshot(ctx, dir)
	if err != nil {
		return nil, chunk.PutStats{}, failure(http.StatusInternalServerError, hostlink.CodeSnapshotFailed, fmt.Errorf("snapshot the warmed machine: %w", err))
	}
	mark("snapshot")
	manifests, put, err := a.upload(ctx, snap, chunk.Manifest{})
	if err != nil {
		return nil, put, failure(http.StatusServiceUnavailable, hostlink.CodeSnapshotFailed, fmt.Errorf("upload the base snapshot: %w", err))
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

// errWarmup marks a failure of the warm-up itself (its exit status, a
// stall, its time limit), as opposed to this host's trouble running it.
var errWarmup = errors.New("warm-up failed")

// runWarmup runs req.Warmup with /bin/sh -c in req.Workdir, failing it when
// it exits non-zero, exceeds req.WarmupTimeout, or prints nothing for
// req.WarmupStall. It returns the tail of its output either way.
func runWarmup(ctx context.Context, gc *guestapi.Client, req hostlink.CaptureRequest) (string, error) {
	if strings.TrimSpace(req.Warmup) == "" {
		return "", nil
	}
	out := &tailWriter{max: warmupTailMax, last: time.Now()}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := req.WarmupStall
	if stall <= 0 {
		stall = req.WarmupTimeout
	}
	go out.watch(ctx, stall, cancel)
	start := guestapi.ExecStart{Argv: []string{"/bin/sh", "-c", req.Warmup}, Dir: req.Workdir, TimeoutMS: req.WarmupTimeout.Milliseconds()}
	exit, err := gc.Exec(ctx, start, nil, out, out)
	var stalled *stallError
	switch {
	case errors.As(context.Cause(ctx), &stalled):
		return out.String(), fmt.Errorf("%w: %q printed nothing for %s (stalled)", errWarmup, req.Warmup, stalled.d)
	case err != nil:
		return out.String(), fmt.Errorf("run warm-up %q: %w", req.Warmup, err)
	case exit.TimedOut:
		return out.String(), fmt.Errorf("%w: %q ran longer than %s", errWarmup, req.Warmup, req.WarmupTimeout)
	case exit.Error != "":
		return out.String(), fmt.Errorf("%w: %q could not run: %s", errWarmup, req.Warmup, exit.Error)
	case exit.ExitCode != 0:
		return out.String(), fmt.Errorf("%w: %q exited with status %d", errWarmup, req.Warmup, exit.ExitCode)
	}
	return out.String(), nil
}

// tailWriter keeps the last max bytes written and when output last came.
type tailWriter struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	last time.Time
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.last = time.Now()
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// stallError is the cause a stalled warm-up is cancelled with.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string { return fmt.Sprintf("no output for %s", e.d) }

// watch cancels with a stall error once no output came for stall.
func (t *tailWriter) watch(ctx context.Context, stall time.Duration, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(max(min(stall/4, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.mu.Lock()
			quiet := time.Since(t.last)
			t.mu.Unlock()
			if quiet >= stall {
				cancel(&stallError{d: stall.Round(time.Millisecond)})
				return
			}
		}
	}
}
