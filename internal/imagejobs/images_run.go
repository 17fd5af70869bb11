package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// materializeLimit bounds pulling and building an image's root filesystem:
// a registry that stalls must not hold the image's one active job forever.
const materializeLimit = 2 * time.Hour

// StageOnHost is the capturing stage of the call to the capture host; its
// own stages (fetch_rootfs, boot, warmup, snapshot, upload) replace it in
// the job's stage times, leaving it only the time they do not cover.
const StageOnHost = "on_host"

// captureAttempts is how many hosts a capture tries when a host fails for
// a reason of its own (unreachable, restarted, out of room).
const captureAttempts = 3

// imageJob resolves, materializes and captures the job's image, and
// returns the image row to commit with the job.
func (c *Images) imageJob(ctx context.Context, r *jobRun) (domain.Image, error) {
	img, err := c.st.GetImage(ctx, r.job.ImageID)
	if err != nil {
		return img, fmt.Errorf("load image: %w", err)
	}
	if img.State == domain.ImageDisabled {
		return img, &jobFailure{err: fmt.Errorf("image %s was disabled", img.Name)}
	}
	if c.images == nil {
		return img, &jobFailure{err: errors.New("this server has no blob store configured (engrams server --blob-dir or S3 flags), so it cannot keep image root filesystems")}
	}
	cfg, err := decodeImageConfig(img)
	if err != nil {
		return img, err
	}
	auth, err := c.openCredential(ctx, img.CredentialID)
	if err != nil {
		return img, &jobFailure{err: err}
	}
	r.progress(image.StageResolve, 0, 0)
	var res oci.Resolved
	err = retryPull(ctx, c, func() error {
		res, err = c.images.Resolve(ctx, img.Ref, auth)
		return err
	})
	if err != nil {
		return img, &jobFailure{err: explainPull(err)}
	}
	r.mu.Lock()
	r.digest = res.Digest
	r.mu.Unlock()
	if cfg.Workdir == "" {
		cfg.Workdir = res.Config.WorkingDir
	}
	if base, ok, err := c.reusableBase(ctx, img, cfg, res.Digest); err != nil {
		return img, err
	} else if ok {
		c.log.Info("image digest already enabled; reusing its base snapshot", "image_id", img.ID, "digest", res.Digest, "from_image", base.ID)
		img.Digest, img.Manifests, img.Facts, img.BaseID, img.Config = base.Digest, base.Manifests, base.Facts, base.BaseID, base.Config
		img.State = domain.ImageReady
		return img, nil
	}
	var mat image.Result
	mctx, cancel := context.WithTimeout(ctx, materializeLimit)
	defer cancel()
	err = retryPull(mctx, c, func() error {
		mat, err = c.images.Materialize(mctx, image.Request{
			Ref: res.Pinned(), Auth: auth, DiskGiB: cfg.DiskGiB,
			Progress: func(stage string, done, total int64) { r.progress(stage, done, total) },
		})
		return err
	})
	if err != nil && ctx.Err() == nil && mctx.Err() != nil {
		return img, &jobFailure{err: fmt.Errorf("pulling and building the root filesystem took longer than %s (a stalled registry?): %w", materializeLimit, err)}
	}
	if err != nil {
		return img, &jobFailure{err: explainPull(err)}
	}
	r.warn(mat.Warnings)
	for _, w := range mat.Warnings {
		c.log.Info("image enabled with a warning", "image_id", img.ID, "digest", mat.Digest, "warning", w)
	}
	cfg.Libc, cfg.User, cfg.ImageEnv = mat.Libc, mat.Config.User, mat.Config.Env
	cfg.Entrypoint = slices.Concat(mat.Config.Entrypoint, mat.Config.Cmd)
	rootfs, err := json.Marshal(mat.RootFS)
	if err != nil {
		return img, err
	}
	resp, err := c.capture(ctx, r, img, cfg, rootfs)
	if err != nil {
		return img, err
	}
	r.addStages(resp.StagesMS)
	img.Digest, img.Manifests, img.BaseID, img.State = mat.Digest, resp.Manifests, domain.SnapshotID(resp.SnapshotID), domain.ImageReady
	img.Facts = resp.Facts
	if img.Config, err = json.Marshal(cfg); err != nil {
		return img, err
	}
	return img, nil
}

// sameCapture reports whether base snapshots made with a and b are
// interchangeable: same machine, env, disk and warm-up.
func sameCapture(a, b ImageConfig) bool {
	return a.MemoryMiB == b.MemoryMiB && a.VCPUs == b.VCPUs && a.DiskGiB == b.DiskGiB && a.Workdir == b.Workdir &&
		a.Warmup == b.Warmup && maps.Equal(a.Env, b.Env)
}

// reusableBase finds a live, ready image (img itself included) whose base
// snapshot was made from digest with the same capture settings. Any
// organisation's: the digest was resolved by img's own pull (with its
// own registry access), and a base snapshot is that digest's content.
func (c *Images) reusableBase(ctx context.Context, img domain.Image, cfg ImageConfig, digest string) (domain.Image, bool, error) {
	imgs, err := c.st.ListImages(ctx, "")
	if err != nil {
		return domain.Image{}, false, fmt.Errorf("list images: %w", err)
	}
	for _, o := range imgs {
		if o.State == domain.ImageDisabled || !usable(o) || o.Digest != digest {
			continue
		}
		ocfg, err := decodeImageConfig(o)
		if err != nil || !sameCapture(cfg, ocfg) {
			continue
		}
		return o, true, nil
	}
	return domain.Image{}, false, nil
}

// pullAttempts bounds how often a pull failing for a reason that may pass
// (the registry unreachable, a dropped connection) is tried.
const pullAttempts = 3

// retryPull runs fn until it succeeds, fails for a reason that will not
// pass (a refusal the registry or the image gives), or pullAttempts ran.
func retryPull(ctx context.Context, c *Images, fn func() error) error {
	wait := c.cfg.ImagePullRetry
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || permanentPull(err) || attempt == pullAttempts || ctx.Err() != nil {
			return err
		}
		c.log.Warn("image pull failed; retrying", "attempt", attempt, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// permanentPull reports whether a pull failure is the image's or the
// registry's answer (retrying gives the same).
func permanentPull(err error) bool {
	for _, e := range []error{netpolicy.ErrBlocked, oci.ErrInvalidReference, oci.ErrNotFound, oci.ErrUnauthorized, oci.ErrNoPlatform,
		oci.ErrCorruptLayer, oci.ErrUnsafeLayer, oci.ErrTooLarge, oci.ErrNoShell, vmimage.ErrTreeTooLarge, vmimage.ErrUnsupportedTree} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// explainPull keeps a pull failure's message and says what to do for the
// common categories.
func explainPull(err error) error {
	switch {
	case errors.Is(err, netpolicy.ErrBlocked):
		return fmt.Errorf("%w (this server fetches images only from public addresses unless its operator allows the registry: "+
			"engrams server --allow-registry HOST[:PORT] or CIDR)", err)
	case errors.Is(err, oci.ErrUnauthorized):
		return fmt.Errorf("%w (check the registry credentials given to `image enable`)", err)
	case errors.Is(err, oci.ErrNotFound):
		return fmt.Errorf("%w (check the repository and tag)", err)
	}
	return err
}

// capture asks a host able to boot images to make the base snapshot,
// trying another host when one fails for reasons of its own.
func (c *Images) capture(ctx context.Context, r *jobRun, img domain.Image, cfg ImageConfig, rootfs json.RawMessage) (hostlink.CaptureResponse, error) {
	req := hostlink.CaptureRequest{
		ImageID: string(img.ID), RootFS: rootfs, MemoryMiB: cfg.MemoryMiB, VCPUs: cfg.VCPUs,
		Env: imageEnv(cfg, nil), Workdir: cfg.Workdir, Warmup: cfg.Warmup,
		WarmupTimeout: time.Duration(cfg.WarmupTimeoutS) * time.Second,
		WarmupStall:   time.Duration(cfg.WarmupStallS) * time.Second,
	}
	limit := req.WarmupTimeout + 10*time.Minute // boot, snapshot and upload besides the warm-up
	if err := r.move(JobCapture, "place"); err != nil {
		return hostlink.CaptureResponse{}, &jobFailure{err: err}
	}
	var exclude []domain.HostID
	var last error
	for attempt := range captureAttempts {
		r.progress("place", 0, 0)
		hostID, err := c.place.PlaceWithin(ctx, domain.SessionSpec{MemoryMiB: cfg.MemoryMiB, VCPUs: cfg.VCPUs},
			scheduler.Need{Exclude: exclude, RootFS: true}, c.cfg.PlacementWait)
		if err != nil {
			if errors.Is(err, scheduler.ErrNoCapacity) && last != nil {
				return hostlink.CaptureResponse{}, last
			}
			return hostlink.CaptureResponse{}, &jobFailure{err: fmt.Errorf("no host can capture the image: %w", err)}
		}
		req.SnapshotID = fmt.Sprintf("%s.%d.%d", r.job.ID, r.job.Epoch, attempt)
		r.progress(StageOnHost, 0, 0)
		c.log.Info("capturing image", "image_id", img.ID, "host_id", hostID, "snapshot_id", req.SnapshotID)
		resp, err := c.links.Capture(ctx, limit, hostID, r.job.ID, r.job.Epoch, req)
		if err == nil {
			return resp, nil
		}
		var herr *hostlink.HostError
		if errors.As(err, &herr) && errors.Is(err, hostlink.ErrImageRefused) {
			return resp, &jobFailure{err: fmt.Errorf("capture on host %s: %s", hostID, herr.Msg), tail: herr.Tail}
		}
		if ctx.Err() != nil {
			return resp, ctx.Err()
		}
		c.log.Warn("image capture failed on a host; trying another", "image_id", img.ID, "host_id", hostID, "err", err)
		last = &jobFailure{err: fmt.Errorf("capture: %w", err)}
		exclude = append(exclude, hostID)
	}
	return hostlink.CaptureResponse{}, last
}
