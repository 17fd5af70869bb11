package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Image defaults and bounds.
const (
	defaultImageMemoryMiB   = 512
	defaultImageDiskGiB     = 4
	maxImageDiskGiB         = 256
	defaultWarmupTimeoutSec = 600
	defaultWarmupStallSec   = 120
	maxWarmupBytes          = 16 << 10
	maxImageNameLen         = 63
)

// ImageConfig is how an image's sessions run; it is the JSON of
// domain.Image.Config.
type ImageConfig struct {
	Env            map[string]string `json:"env,omitempty"`
	MemoryMiB      int               `json:"memory_mib"`
	VCPUs          int               `json:"vcpus"`
	DiskGiB        int               `json:"disk_gib"`
	Workdir        string            `json:"workdir,omitempty"`
	Warmup         string            `json:"warmup,omitempty"`
	WarmupTimeoutS int               `json:"warmup_timeout_s"`
	WarmupStallS   int               `json:"warmup_stall_s"`
	// Found in the image when it was materialized.
	Libc       string   `json:"libc,omitempty"` // glibc, musl or none
	User       string   `json:"user,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	ImageEnv   []string `json:"image_env,omitempty"` // the image's own ENV, applied under Env
}

// RegistryAuth is how to log in to an image's registry.
type RegistryAuth struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	Token    string `json:"token,omitempty"`
}

func (a *RegistryAuth) empty() bool {
	return a == nil || (a.Username == "" && a.Password == "" && a.Token == "")
}

// EnableImageRequest asks to enable an image.
type EnableImageRequest struct {
	Org    domain.OrgID // whose it is; required
	Ref    string
	Name   string // default: the repository's last path element
	Config ImageConfig
	Auth   *RegistryAuth // stored sealed, never returned
}

// Image states as shown (derived from the row and its last job).
const (
	ImagePending  = "pending"
	ImageReady    = "ready"
	ImageFailed   = "failed"
	ImageDisabled = "disabled"
)

// ImageView is an image with what callers show about it.
type ImageView struct {
	Image      domain.Image
	Config     ImageConfig
	State      string            // ImagePending, ImageReady, ImageFailed, ImageDisabled
	Credential string            // "user@registry" or "token@registry"; "" for anonymous pulls
	Facts      *domain.HostFacts // of the base snapshot's host
	ReadyHosts []domain.HostID   // hosts whose heartbeat lists the base snapshot cached
	LastJob    *domain.ImageJob
}

// usable reports whether sessions can start from img: it has a base snapshot.
func usable(img domain.Image) bool {
	return img.State == domain.ImageReady && img.BaseID != "" && len(img.Manifests) > 0
}

// ImageDefaults are the settings an enable request leaving them out gets,
// and their upper bounds.
type ImageDefaults struct {
	MemoryMiB, VCPUs, DiskGiB, WarmupTimeoutS, WarmupStallS int
	MaxMemoryMiB, MaxVCPUs, MaxDiskGiB                      int
}

// Defaults are this coordinator's ImageDefaults (checkImageConfig fills
// them in).
func (c *Images) Defaults() ImageDefaults {
	return ImageDefaults{MemoryMiB: defaultImageMemoryMiB, VCPUs: c.cfg.DefaultVCPUs, DiskGiB: defaultImageDiskGiB,
		WarmupTimeoutS: defaultWarmupTimeoutSec, WarmupStallS: defaultWarmupStallSec,
		MaxMemoryMiB: c.cfg.MaxMemoryMiB, MaxVCPUs: c.cfg.MaxVCPUs, MaxDiskGiB: maxImageDiskGiB}
}

// checkImageConfig validates and fills defaults of cfg.
func (c *Images) checkImageConfig(cfg *ImageConfig) error {
	if cfg.MemoryMiB == 0 {
		cfg.MemoryMiB = defaultImageMemoryMiB
	}
	if cfg.VCPUs == 0 {
		cfg.VCPUs = c.cfg.DefaultVCPUs
	}
	if cfg.DiskGiB == 0 {
		cfg.DiskGiB = defaultImageDiskGiB
	}
	if cfg.WarmupTimeoutS == 0 {
		cfg.WarmupTimeoutS = defaultWarmupTimeoutSec
	}
	if cfg.WarmupStallS == 0 {
		cfg.WarmupStallS = defaultWarmupStallSec
	}
	switch {
	case cfg.MemoryMiB < 128 || cfg.MemoryMiB > c.cfg.MaxMemoryMiB:
		return fmt.Errorf("%w: memory_mib %d out of range [128, %d]", domain.ErrInvalid, cfg.MemoryMiB, c.cfg.MaxMemoryMiB)
	case cfg.VCPUs < 1 || cfg.VCPUs > c.cfg.MaxVCPUs:
		return fmt.Errorf("%w: vcpus %d out of range [1, %d]", domain.ErrInvalid, cfg.VCPUs, c.cfg.MaxVCPUs)
	case cfg.DiskGiB < 1 || cfg.DiskGiB > maxImageDiskGiB:
		return fmt.Errorf("%w: disk_gib %d out of range [1, %d]", domain.ErrInvalid, cfg.DiskGiB, maxImageDiskGiB)
	case cfg.Workdir != "" && (!path.IsAbs(cfg.Workdir) || strings.ContainsAny(cfg.Workdir, "\x00\n")):
		return fmt.Errorf("%w: workdir %q must be an absolute path", domain.ErrInvalid, cfg.Workdir)
	case len(cfg.Warmup) > maxWarmupBytes || strings.ContainsRune(cfg.Warmup, 0):
		return fmt.Errorf("%w: warmup must be at most %d bytes without NUL", domain.ErrInvalid, maxWarmupBytes)
	case cfg.WarmupTimeoutS < 1 || cfg.WarmupTimeoutS > 24*3600:
		return fmt.Errorf("%w: warmup_timeout_s %d out of range [1, 86400]", domain.ErrInvalid, cfg.WarmupTimeoutS)
	case cfg.WarmupStallS < 1 || cfg.WarmupStallS > cfg.WarmupTimeoutS:
		return fmt.Errorf("%w: warmup_stall_s %d out of range [1, warmup_timeout_s]", domain.ErrInvalid, cfg.WarmupStallS)
	}
	return domain.CheckEnv(cfg.Env)
}

// checkImageName validates a user-chosen image name: a DNS-label-like word.
func checkImageName(name string) error {
	if name == "" || len(name) > maxImageNameLen {
		return fmt.Errorf("%w: image name must be 1-%d characters", domain.ErrInvalid, maxImageNameLen)
	}
	for i, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || (i > 0 && (r == '-' || r == '_' || r == '.'))
		if !ok {
			return fmt.Errorf("%w: image name %q: use lowercase letters, digits, '-', '_' and '.', starting with a letter or digit", domain.ErrInvalid, name)
		}
	}
	return nil
}

// defaultImageName is the last path element of ref's repository.
func defaultImageName(ref string) string {
	repo := ref
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, '/'); i >= 0 {
		repo = repo[i+1:]
	}
	if i := strings.IndexByte(repo, ':'); i >= 0 {
		repo = repo[:i]
	}
	return strings.ToLower(repo)
}

// decodeImageConfig reads img's config.
func decodeImageConfig(img domain.Image) (ImageConfig, error) {
	var cfg ImageConfig
	if len(img.Config) == 0 {
		return cfg, nil
	}
	if err := json.Unmarshal(img.Config, &cfg); err != nil {
		return cfg, fmt.Errorf("decode config of image %s: %w", img.ID, err)
	}
	return cfg, nil
}

// findImage returns org's live image named nameOrID, else its image with
// that id; another organisation's is not found, as one that does not exist.
func (c *Images) findImage(ctx context.Context, org domain.OrgID, nameOrID string) (domain.Image, error) {
	img, err := c.st.GetImageByName(ctx, org, nameOrID)
	if errors.Is(err, store.ErrNotFound) {
		img, err = c.st.GetImage(ctx, domain.ImageID(nameOrID))
	}
	if err == nil && (org == "" || img.Org != org) {
		err = store.ErrNotFound
	}
	if errors.Is(err, store.ErrNotFound) {
		return img, fmt.Errorf("image %q: %w", nameOrID, store.ErrNotFound)
	}
	return img, err
}

// View assembles what callers show about img.
func (c *Images) View(ctx context.Context, img domain.Image) (ImageView, error) {
	v := ImageView{Image: img}
	var err error
	if v.Config, err = decodeImageConfig(img); err != nil {
		return v, err
	}
	if img.BaseID != "" {
		f := img.Facts
		v.Facts = &f
	}
	if img.CredentialID != "" {
		if cred, err := c.st.GetCredential(ctx, img.CredentialID); err == nil {
			who := cred.Username
			if who == "" {
				who = "token"
			}
			v.Credential = who + "@" + cred.Registry
		}
	}
	jobs, err := c.st.ListJobs(ctx, img.ID)
	if err != nil {
		return v, fmt.Errorf("list jobs of image %s: %w", img.ID, err)
	}
	if len(jobs) > 0 {
		last := jobs[len(jobs)-1]
		v.LastJob = &last
	}
	switch {
	case img.State == domain.ImageDisabled:
		v.State = ImageDisabled
	case usable(img):
		v.State = ImageReady
	case v.LastJob != nil && v.LastJob.State == domain.JobFailed:
		v.State = ImageFailed
	default:
		v.State = ImagePending
	}
	if img.BaseID != "" && v.State == ImageReady {
		v.ReadyHosts, err = c.hostsCaching(ctx, img.BaseID)
		if err != nil {
			return v, err
		}
	}
	return v, nil
}

// hostsCaching lists ready hosts whose last heartbeat lists snapshot id cached.
func (c *Images) hostsCaching(ctx context.Context, id domain.SnapshotID) ([]domain.HostID, error) {
	hosts, err := c.st.ListHosts(ctx)
	if err != nil {
		return nil, fmt.Errorf("list hosts: %w", err)
	}
	var out []domain.HostID
	for _, h := range hosts {
		if h.State != domain.HostReady {
			continue
		}
		if slices.Contains(h.Capacity.CachedSnapshots, string(id)) {
			out = append(out, h.ID)
		}
	}
	return out, nil
}

// Image returns org's live image named nameOrID (or with that id).
func (c *Images) Image(ctx context.Context, org domain.OrgID, nameOrID string) (ImageView, error) {
	img, err := c.findImage(ctx, org, nameOrID)
	if err != nil {
		return ImageView{}, err
	}
	return c.View(ctx, img)
}

// Images lists org's images by name; disabled ones only when all is set.
func (c *Images) Images(ctx context.Context, org domain.OrgID, all bool) ([]ImageView, error) {
	if org == "" {
		return nil, nil
	}
	imgs, err := c.st.ListImages(ctx, org)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	out := make([]ImageView, 0, len(imgs))
	for _, img := range imgs {
		if img.State == domain.ImageDisabled && !all {
			continue
		}
		v, err := c.View(ctx, img)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ImageJobs lists org's image's jobs, oldest first.
func (c *Images) ImageJobs(ctx context.Context, org domain.OrgID, nameOrID string) ([]domain.ImageJob, error) {
	img, err := c.findImage(ctx, org, nameOrID)
	if err != nil {
		return nil, err
	}
	return c.st.ListJobs(ctx, img.ID)
}

// ImageJob returns one job of org's images; another organisation's is
// not found.
func (c *Images) ImageJob(ctx context.Context, org domain.OrgID, id domain.ImageJobID) (domain.ImageJob, error) {
	job, err := c.st.GetJob(ctx, id)
	if err != nil {
		return job, err
	}
	if img, err := c.st.GetImage(ctx, job.ImageID); err != nil || org == "" || img.Org != org {
		return domain.ImageJob{}, fmt.Errorf("image job %q: %w", id, store.ErrNotFound)
	}
	return job, nil
}

// DisableImage disables an image: no new session starts from it; running
// sessions and their snapshots keep what they use. Its name is free again.
func (c *Images) DisableImage(ctx context.Context, org domain.OrgID, nameOrID string) (ImageView, error) {
	img, err := c.findImage(ctx, org, nameOrID)
	if err != nil {
		return ImageView{}, err
	}
	if img.State != domain.ImageDisabled {
		if err := c.st.SetImageState(ctx, img.ID, domain.ImageDisabled, c.now()); err != nil {
			return ImageView{}, fmt.Errorf("disable image %s: %w", img.Name, err)
		}
		img.State = domain.ImageDisabled
		c.log.Info("image disabled", "image_id", img.ID, "name", img.Name)
	}
	return c.View(ctx, img)
}

// envKeys are the env variable names of cfg, sorted (for logs).
func envKeys(env map[string]string) []string { return slices.Sorted(maps.Keys(env)) }
