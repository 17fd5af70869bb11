package imagejobs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/scheduler"
	"github.com/engrams/engrams/internal/store"
)

// PinImage resolves spec.Image to a ready image of the session's
// organisation and fills in what its
// sessions run with: its machine size (a base snapshot cannot change it),
// its env under the session's, and the image and base snapshot ids. It
// returns the image's C library ("" without an image).
func (c *Images) PinImage(ctx context.Context, spec *domain.SessionSpec) (string, error) {
	spec.ImageID, spec.BaseSnapshotID = "", ""
	if spec.Image == "" {
		return "", nil
	}
	img, err := c.findImage(ctx, spec.Owner.OrgID, spec.Image)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("%w: no enabled image is named %q (see `engrams image list`)", domain.ErrInvalid, spec.Image)
	}
	if err != nil {
		return "", fmt.Errorf("find image %s: %w", spec.Image, err)
	}
	v, err := c.View(ctx, img)
	if err != nil {
		return "", err
	}
	if v.State != ImageReady {
		return "", fmt.Errorf("%w: image %s is %s%s; sessions start once it is ready", domain.ErrInvalid, img.Name, v.State, JobSummary(v.LastJob))
	}
	cfg := v.Config
	switch {
	case spec.MemoryMiB != 0 && spec.MemoryMiB != cfg.MemoryMiB:
		return "", fmt.Errorf("%w: sessions of image %s have %d MiB of memory (its base snapshot's); enable it with --memory to change that", domain.ErrInvalid, img.Name, cfg.MemoryMiB)
	case spec.VCPUs != 0 && spec.VCPUs != cfg.VCPUs:
		return "", fmt.Errorf("%w: sessions of image %s have %d vCPUs (its base snapshot's); enable it with --vcpus to change that", domain.ErrInvalid, img.Name, cfg.VCPUs)
	}
	spec.MemoryMiB, spec.VCPUs = cfg.MemoryMiB, cfg.VCPUs
	spec.Env = imageEnv(cfg, spec.Env)
	spec.Image, spec.ImageID, spec.BaseSnapshotID = img.Name, img.ID, img.BaseID
	return cfg.Libc, nil
}

// imageEnv is the environment of an image's processes: the image's own
// ENV, then the env it was enabled with, then over (a session's).
func imageEnv(cfg ImageConfig, over map[string]string) map[string]string {
	env := map[string]string{}
	for _, kv := range cfg.ImageEnv {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	if cfg.Workdir != "" {
		env[EnvWorkdir] = cfg.Workdir
	}
	maps.Copy(env, cfg.Env)
	maps.Copy(env, over)
	return env
}

// EnvWorkdir tells the guest daemon the default working directory of
// commands (an image's --workdir, else its WORKDIR).
const EnvWorkdir = "ENGRAMS_WORKDIR"

// JobSummary says where a job is, for messages: " (materializing: pull)".
func JobSummary(j *domain.ImageJob) string {
	if j == nil {
		return ""
	}
	s := string(j.State)
	if j.Stage != "" {
		s += ": " + j.Stage
	}
	if j.Error != "" {
		s += ": " + j.Error
	}
	return " (" + s + ")"
}

// errImageChanged: the image a session was created from now has another
// base snapshot (it was refreshed before the session started). It is a
// domain.ErrConflict: the session cannot start.
var errImageChanged = fmt.Errorf("image changed since the session was created: %w", domain.ErrConflict)

// Base returns the image a session was created from, with the base
// snapshot pinned at creation (one disabled since still has it). An image
// refreshed between the create request and its op fails with
// errImageChanged: the session's env and size came from the old digest.
func (c *Images) Base(ctx context.Context, spec domain.SessionSpec) (domain.Image, error) {
	img, err := c.st.GetImage(ctx, spec.ImageID)
	if err != nil {
		return img, fmt.Errorf("image %s of the session: %w", spec.Image, err)
	}
	if img.BaseID != spec.BaseSnapshotID || len(img.Manifests) == 0 {
		return img, fmt.Errorf("image %s was refreshed or disabled before this session started (base %s, the session was created for %s); create the session again: %w",
			img.Name, img.BaseID, spec.BaseSnapshotID, errImageChanged)
	}
	return img, nil
}

// PrefetchFor lists the base snapshots of ready images that host could
// restore and does not list as cached yet. Errors only cost the prefetch.
func (c *Images) PrefetchFor(ctx context.Context, hostID domain.HostID, cached []string) []hostlink.Prefetch {
	imgs, err := c.st.ListImages(ctx, "") // the fleet's: every organisation's
	if err != nil {
		c.log.Warn("prefetch: list images", "host_id", hostID, "err", err)
		return nil
	}
	var hf *domain.HostFacts
	var out []hostlink.Prefetch
	for _, img := range imgs {
		if img.State == domain.ImageDisabled || !usable(img) || slices.Contains(cached, string(img.BaseID)) {
			continue
		}
		if hf == nil {
			h, err := c.st.GetHost(ctx, hostID)
			if err != nil {
				return nil
			}
			hf = &h.Facts
		}
		if scheduler.Compatible(img.Facts, *hf) != "" {
			continue
		}
		out = append(out, hostlink.Prefetch{ImageID: string(img.ID), SnapshotID: string(img.BaseID), Manifests: img.Manifests})
	}
	return out
}

// MarkLive adds the chunks of every live image's base snapshot to live (a
// disabled image's base stays reachable through the snapshots of sessions
// started from it): image bases are a GC root.
func (c *Images) MarkLive(ctx context.Context, live map[string]bool) error {
	imgs, err := c.st.ListImages(ctx, "") // every organisation's
	if err != nil {
		return fmt.Errorf("list images: %w", err)
	}
	for _, img := range imgs {
		if img.State == domain.ImageDisabled || len(img.Manifests) == 0 {
			continue
		}
		if err := chunk.MarkLiveRoles(live, img.Manifests); err != nil {
			return fmt.Errorf("image %s: %w", img.ID, err)
		}
	}
	return nil
}
