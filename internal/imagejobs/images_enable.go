package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/store"
)

// topicImageJobs wakes the image job runners of every replica.
const topicImageJobs = "image-jobs"

// EnableImage enables req.Ref under req.Name. A live image with that name
// and ref answers with itself and its last job (enabling again is
// idempotent; a failed image gets a new job); another ref under the name is
// a conflict. The job runs in the background: pending -> materializing ->
// capturing -> ready | failed.
func (c *Images) EnableImage(ctx context.Context, req EnableImageRequest) (ImageView, domain.ImageJob, error) {
	ref := strings.TrimSpace(req.Ref)
	if ref == "" || len(ref) > domain.MaxImageRef || strings.ContainsAny(ref, "\x00\n ") {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("%w: ref must be an image reference of at most %d characters", domain.ErrInvalid, domain.MaxImageRef)
	}
	registry, err := oci.ParseReference(ref)
	if err != nil {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("%w: %w", domain.ErrInvalid, err)
	}
	if err := c.checkRegistry(registry); err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	name := req.Name
	if name == "" {
		name = defaultImageName(ref)
	}
	if err := checkImageName(name); err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	cfg := req.Config
	if err := c.checkImageConfig(&cfg); err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	if req.Org == "" {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("%w: an image is an organisation's", domain.ErrInvalid)
	}
	if existing, err := c.st.GetImageByName(ctx, req.Org, name); err == nil {
		return c.enableExisting(ctx, existing, ref, registry, cfg, req.Auth)
	} else if !errors.Is(err, store.ErrNotFound) {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("enable image %s: %w", name, err)
	}
	img := domain.Image{ID: domain.ImageID(c.newID()), Org: req.Org, Name: name, Ref: ref, State: domain.ImageReady, CreatedAt: c.now()}
	if img.Config, err = json.Marshal(cfg); err != nil {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("enable image %s: %w", name, err)
	}
	if !req.Auth.empty() {
		if img.CredentialID, err = c.sealCredential(ctx, registry, *req.Auth); err != nil {
			return ImageView{}, domain.ImageJob{}, fmt.Errorf("enable image %s: %w", name, err)
		}
	}
	if err := c.st.CreateImage(ctx, img); err != nil {
		if img.CredentialID != "" {
			_ = c.st.DeleteCredential(ctx, img.CredentialID)
		}
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("enable image %s: %w", name, err)
	}
	job, err := c.newJob(ctx, img, domain.ImageJobEnable)
	if err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	c.log.Info("image enable requested", "image_id", img.ID, "name", name, "ref", ref, "job_id", job.ID,
		"env", envKeys(cfg.Env), "memory_mib", cfg.MemoryMiB, "disk_gib", cfg.DiskGiB)
	v, err := c.View(ctx, img)
	return v, job, err
}

// checkRegistry refuses a registry at an address this server does not
// reach (loopback, private ranges) unless its operator allowed it.
func (c *Images) checkRegistry(registry string) error {
	host, port := registry, uint16(443)
	if h, p, err := net.SplitHostPort(registry); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: registry %s: port %q is not 1 to 65535", domain.ErrInvalid, registry, p)
		}
		host, port = h, uint16(n)
	}
	if err := c.regs.CheckHost(host, port); err != nil {
		return fmt.Errorf("%w: registry %s: %w; %s", domain.ErrInvalid, registry, err, allowRegistryHint(registry))
	}
	return nil
}

// allowRegistryHint says how an operator lets this server use registry.
func allowRegistryHint(registry string) string {
	return fmt.Sprintf("this server fetches images only from public addresses unless its operator allows the registry "+
		"(engrams server --allow-registry %s, or a CIDR such as 10.0.0.0/8; engrams dev allows loopback)", registry)
}

// enableExisting answers an enable of a name that is taken: a ready image
// or one with a job running answers as it is; one whose last job failed is
// tried again with the settings and credentials of this request.
func (c *Images) enableExisting(ctx context.Context, img domain.Image, ref, registry string, cfg ImageConfig, auth *RegistryAuth) (ImageView, domain.ImageJob, error) {
	if img.Ref != ref {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("%w: image name %q is taken by %s; choose another --name or disable it first", store.ErrConflict, img.Name, img.Ref)
	}
	v, err := c.View(ctx, img)
	if err != nil {
		return v, domain.ImageJob{}, err
	}
	if v.LastJob != nil && (v.LastJob.State.Active() || v.State == ImageReady) {
		return v, *v.LastJob, nil
	}
	if err := c.resetFailed(ctx, &img, registry, cfg, auth); err != nil {
		return v, domain.ImageJob{}, err
	}
	job, err := c.newJob(ctx, img, domain.ImageJobEnable)
	if err != nil {
		return v, domain.ImageJob{}, err
	}
	if v, err = c.View(ctx, img); err != nil {
		return v, job, err
	}
	return v, job, nil
}

// resetFailed gives an image whose enable failed this request's settings
// and, if given, credentials (replacing the old ones).
func (c *Images) resetFailed(ctx context.Context, img *domain.Image, registry string, cfg ImageConfig, auth *RegistryAuth) error {
	raw, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	img.Config = raw
	old := img.CredentialID
	if !auth.empty() {
		if img.CredentialID, err = c.sealCredential(ctx, registry, *auth); err != nil {
			return fmt.Errorf("enable image %s: %w", img.Name, err)
		}
	}
	if err := c.st.UpdateImage(ctx, *img, c.now()); err != nil {
		return fmt.Errorf("enable image %s: %w", img.Name, err)
	}
	if old != "" && old != img.CredentialID {
		if err := c.st.DeleteCredential(ctx, old); err != nil {
			c.log.Warn("delete replaced registry credential", "image_id", img.ID, "err", err)
		}
	}
	return nil
}

// RefreshImage re-pulls an image's ref and enables the digest it names now;
// the image keeps serving its current base snapshot until the new one is
// ready, and sessions already running keep theirs.
func (c *Images) RefreshImage(ctx context.Context, org domain.OrgID, nameOrID string) (ImageView, domain.ImageJob, error) {
	img, err := c.findImage(ctx, org, nameOrID)
	if err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	if img.State == domain.ImageDisabled {
		return ImageView{}, domain.ImageJob{}, fmt.Errorf("%w: image %s is disabled; enable it again", store.ErrConflict, img.Name)
	}
	job, err := c.newJob(ctx, img, domain.ImageJobRefresh)
	if err != nil {
		return ImageView{}, domain.ImageJob{}, err
	}
	v, err := c.View(ctx, img)
	return v, job, err
}

// newJob inserts a pending job for img and wakes the runners. If another
// job of img is active, that one is returned.
func (c *Images) newJob(ctx context.Context, img domain.Image, kind domain.ImageJobKind) (domain.ImageJob, error) {
	job, err := c.st.CreateJob(ctx, domain.ImageJob{ID: domain.ImageJobID(c.newID()), ImageID: img.ID, Kind: kind, CreatedAt: c.now()})
	if errors.Is(err, store.ErrJobActive) {
		jobs, lerr := c.st.ListJobs(ctx, img.ID)
		if lerr != nil {
			return domain.ImageJob{}, fmt.Errorf("%s image %s: %w", kind, img.Name, lerr)
		}
		for _, j := range jobs {
			if j.State.Active() {
				return j, nil
			}
		}
	}
	if err != nil {
		return domain.ImageJob{}, fmt.Errorf("%s image %s: %w", kind, img.Name, err)
	}
	if err := c.st.Notify(ctx, topicImageJobs); err != nil {
		c.log.Warn("notify image jobs", "err", err)
	}
	return job, nil
}

// sealCredential stores auth sealed and returns its id.
func (c *Images) sealCredential(ctx context.Context, registry string, auth RegistryAuth) (string, error) {
	if c.secrets == nil {
		return "", fmt.Errorf("%w: this server keeps no secrets (no key configured), so it cannot store registry credentials", domain.ErrInvalid)
	}
	plain, err := json.Marshal(auth)
	if err != nil {
		return "", err
	}
	id := c.newID()
	sealed, err := c.secrets.Seal(plain, domain.SealedRegistryCredential.AssociatedData(id))
	if err != nil {
		return "", fmt.Errorf("seal registry credential: %w", err)
	}
	cred := domain.RegistryCredential{ID: id, Registry: registry, Username: auth.Username, Sealed: sealed, CreatedAt: c.now()}
	if err := c.st.PutCredential(ctx, cred); err != nil {
		return "", fmt.Errorf("store registry credential: %w", err)
	}
	return id, nil
}

// openCredential returns the registry login of img ("" id: anonymous).
func (c *Images) openCredential(ctx context.Context, id string) (oci.Credentials, error) {
	if id == "" {
		return oci.Credentials{}, nil
	}
	if c.secrets == nil {
		return oci.Credentials{}, errors.New("open registry credential: this server keeps no secrets key")
	}
	cred, err := c.st.GetCredential(ctx, id)
	if err != nil {
		return oci.Credentials{}, fmt.Errorf("open registry credential %s: %w", id, err)
	}
	plain, err := c.secrets.Open(cred.Sealed, domain.SealedRegistryCredential.AssociatedData(id))
	if err != nil {
		return oci.Credentials{}, fmt.Errorf("open registry credential %s: %w", id, err)
	}
	var auth RegistryAuth
	if err := json.Unmarshal(plain, &auth); err != nil {
		return oci.Credentials{}, fmt.Errorf("open registry credential %s: %w", id, err)
	}
	return oci.Credentials{Username: auth.Username, Password: auth.Password, Token: auth.Token}, nil
}
