package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/store"
)

// env is a coordinator and its fake fleet with an image service wired in.
type env struct {
	st store.Store
	co *coordinator.Coordinator
	im *Images
	ct *coordinatortest.Env
}

// newEnvWith runs image jobs configured by cfg, with the collaborators of
// extra (Images, Secrets), against a coordinator on fake hosts.
func newEnvWith(t *testing.T, cfg Config, extra Deps) *env {
	t.Helper()
	st, f := coordinatortest.NewStore(t), coordinatortest.NewFleet()
	im, err := New(cfg, Deps{Store: st, Hosts: f, Place: coordinator.NewPlacement(st, 0, nil), Images: extra.Images, Secrets: extra.Secrets,
		Registries: extra.Registries})
	if err != nil {
		t.Fatal(err)
	}
	ct := coordinatortest.Run(t, coordinator.Config{PlacementWait: cfg.PlacementWait}, st,
		coordinator.Deps{Store: st, Hosts: f, Images: im, Roots: []coordinator.ChunkRoots{im}}, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = im.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{st: st, co: ct.Co, im: im, ct: ct}
}

func (e *env) addHost(t *testing.T, name string, n int) (domain.HostID, *coordinatortest.FakeHost) {
	t.Helper()
	return e.ct.AddHost(t, name, n)
}

func (e *env) addHostWith(t *testing.T, name string, n int, hf domain.HostFacts) (domain.HostID, *coordinatortest.FakeHost) {
	t.Helper()
	return e.ct.AddHostWith(t, name, n, hf)
}

func (e *env) keepAlive(t *testing.T, id domain.HostID) (stop func()) {
	t.Helper()
	return e.ct.KeepAlive(t, id)
}

func (e *env) wait(t *testing.T, id domain.SessionID, want domain.SessionState) domain.Session {
	t.Helper()
	return e.ct.Wait(t, id, want)
}

func waitJob(t *testing.T, e *env, id domain.ImageJobID) domain.ImageJob {
	t.Helper()
	return coordinatortest.WaitJob(t, e.st, id)
}

func TestImageEnableCapturesAndSessionsRestoreTheBase(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:aaa"}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs, Secrets: coordinatortest.Sealer{}})
	hostID, h := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	v, job, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Config: ImageConfig{Warmup: "echo warmed > /warm", Env: map[string]string{"LANG": "C.UTF-8"}},
		Auth: &RegistryAuth{Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Image.Name != "app" || v.State != ImagePending || v.Credential != "u@index.docker.io" {
		t.Fatalf("enable answered %+v", v)
	}
	// The defaults the API shows are the ones an enable without settings gets.
	if d := e.im.Defaults(); d.MemoryMiB != 512 || v.Config.MemoryMiB != d.MemoryMiB || v.Config.VCPUs != d.VCPUs || v.Config.DiskGiB != d.DiskGiB ||
		v.Config.WarmupTimeoutS != d.WarmupTimeoutS || v.Config.WarmupStallS != d.WarmupStallS {
		t.Errorf("defaults %+v, the image got %+v", d, v.Config)
	}
	job = waitJob(t, e, job.ID)
	if job.State != domain.JobReady || job.Digest != "sha256:aaa" || job.Attempts != 1 {
		t.Fatalf("job %+v", job)
	}
	var stages map[string]int64
	_ = json.Unmarshal(job.Stages, &stages)
	if stages["boot"] != 30 || stages["warmup"] != 20 {
		t.Fatalf("stages %v lack the host's", stages)
	}
	if len(imgs.Auth) == 0 || imgs.Auth[0].Username != "u" || imgs.Auth[0].Password != "p" {
		t.Fatalf("credentials did not reach the puller: %v", imgs.Auth)
	}
	if len(h.Captures) != 1 || h.Captures[0].Warmup != "echo warmed > /warm" || h.Captures[0].Workdir != "/work" ||
		h.Captures[0].Env["PATH"] != "/usr/bin:/bin" || h.Captures[0].Env["LANG"] != "C.UTF-8" {
		t.Fatalf("capture request %+v", h.Captures)
	}
	v, err = e.im.Image(ctx, domain.FirstOrg, "app")
	if err != nil || v.State != ImageReady || v.Config.Libc != image.LibcMusl || v.Image.BaseID == "" {
		t.Fatalf("image %+v %v", v, err)
	}

	s, err := e.co.CreateSession(ctx, domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg}, Image: "app", Env: map[string]string{"LANG": "fr"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, s.ID, domain.SessionActive)
	h.Mu.Lock()
	last := h.Starts[len(h.Starts)-1]
	h.Mu.Unlock()
	if last.Restore == nil || !last.Restore.Base || last.Restore.SnapshotID != string(v.Image.BaseID) ||
		last.Spec.MemoryMiB != defaultImageMemoryMiB || last.Spec.Env["LANG"] != "fr" || last.Spec.Env["PATH"] != "/usr/bin:/bin" {
		t.Fatalf("start request %+v", last)
	}

	// Enabling the same digest under another name reuses the base at once.
	imgs.Digests["reg/app:latest"] = "sha256:aaa"
	_, job2, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:latest", Name: "app2", Config: ImageConfig{Warmup: "echo warmed > /warm", Env: map[string]string{"LANG": "C.UTF-8"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job2 = waitJob(t, e, job2.ID); job2.State != domain.JobReady || imgs.Calls != 1 || len(h.Captures) != 1 {
		t.Fatalf("re-enable of a ready digest: job %+v, %d materializations, %d captures", job2, imgs.Calls, len(h.Captures))
	}
}

func TestImageEnableFailures(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		ref       string
		warmFail  string
		matErr    error
		wantErr   string
		wantTail  string
		wantState string
	}{
		{name: "unknown repository", ref: "reg/nope:1", wantErr: "not found"},
		{name: "no shell", ref: "reg/app:1", matErr: fmt.Errorf("pull: %w", oci.ErrNoShell), wantErr: oci.ErrNoShell.Error()},
		{name: "warm-up fails", ref: "reg/app:1", warmFail: "boom\n", wantErr: "warm-up exited with status 3", wantTail: "boom\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:bbb"}, Fail: map[string]error{"reg/app@sha256:bbb": tc.matErr}}
			e := newEnvWith(t, Config{}, Deps{Images: imgs})
			hostID, h := e.addHost(t, "a", 8)
			h.WarmFail = tc.warmFail
			e.keepAlive(t, hostID)
			ctx := context.Background()
			_, job, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: tc.ref})
			if err != nil {
				t.Fatal(err)
			}
			job = waitJob(t, e, job.ID)
			if job.State != domain.JobFailed || !strings.Contains(job.Error, tc.wantErr) || job.OutputTail != tc.wantTail {
				t.Fatalf("job %+v, want failed with %q and tail %q", job, tc.wantErr, tc.wantTail)
			}
			v, err := e.im.Image(ctx, domain.FirstOrg, defaultImageName(tc.ref))
			if err != nil || v.State != ImageFailed || len(v.Image.Manifests) != 0 {
				t.Fatalf("image %+v %v, want failed without a base", v, err)
			}
			if _, err := e.co.CreateSession(ctx, domain.SessionSpec{Image: v.Image.Name}, ""); !errors.Is(err, domain.ErrInvalid) {
				t.Fatalf("session from a failed image: %v", err)
			}
		})
	}
}

func TestImagePullRetriesTransientFailures(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:e"}, Flaky: 2}
	e := newEnvWith(t, Config{ImagePullRetry: 10 * time.Millisecond}, Deps{Images: imgs})
	hostID, _ := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	_, job, err := e.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobReady || len(imgs.Auth) != 3 {
		t.Fatalf("job %+v after %d resolves, want ready after 3", job, len(imgs.Auth))
	}
	imgs.Mu.Lock()
	imgs.Flaky = 5
	imgs.Mu.Unlock()
	_, job, err = e.im.EnableImage(context.Background(), EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Name: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobFailed || !strings.Contains(job.Error, "connection reset") {
		t.Fatalf("job %+v, want failed after %d attempts", job, pullAttempts)
	}
}

func TestImageReEnableAfterFailureTakesNewSettings(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:f"}, Fail: map[string]error{"reg/app@sha256:f": fmt.Errorf("pull: %w", oci.ErrUnauthorized)}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs, Secrets: coordinatortest.Sealer{}})
	hostID, _ := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	_, job, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Auth: &RegistryAuth{Username: "u", Password: "wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobFailed {
		t.Fatalf("first job %+v", job)
	}
	imgs.Mu.Lock()
	delete(imgs.Fail, "reg/app@sha256:f")
	imgs.Mu.Unlock()
	v, job2, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Config: ImageConfig{MemoryMiB: 1024},
		Auth: &RegistryAuth{Username: "u", Password: "right"}})
	if err != nil || job2.ID == job.ID {
		t.Fatalf("re-enable: %+v %v", job2, err)
	}
	if job2 = waitJob(t, e, job2.ID); job2.State != domain.JobReady {
		t.Fatalf("second job %+v", job2)
	}
	imgs.Mu.Lock()
	last := imgs.Auth[len(imgs.Auth)-1]
	imgs.Mu.Unlock()
	if last.Password != "right" {
		t.Fatalf("the retry pulled with %q, not the new password", last.Password)
	}
	if v, err = e.im.Image(ctx, domain.FirstOrg, v.Image.Name); err != nil || v.Config.MemoryMiB != 1024 || v.State != ImageReady {
		t.Fatalf("image after re-enable: %+v %v", v, err)
	}
}

func TestImageDisabledDuringItsJobStaysDisabled(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:g"}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs})
	hostID, h := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	h.Mu.Lock() // holds the capture until the image is disabled
	_, job, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1"})
	if err != nil {
		h.Mu.Unlock()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		j, err := e.st.GetJob(ctx, job.ID)
		if err == nil && j.State == domain.JobCapturing && j.Stage == StageOnHost {
			break // the capture is in flight, held by the host's lock
		}
		if time.Now().After(deadline) {
			h.Mu.Unlock()
			t.Fatalf("job never reached its capture: %+v %v", j, err)
		}
	}
	if _, err := e.im.DisableImage(ctx, domain.FirstOrg, "app"); err != nil {
		h.Mu.Unlock()
		t.Fatal(err)
	}
	h.Mu.Unlock()
	if job = waitJob(t, e, job.ID); job.State != domain.JobFailed || !strings.Contains(job.Error, "disabled") {
		t.Fatalf("job %+v, want failed: disabled meanwhile", job)
	}
	img, err := e.st.GetImage(ctx, job.ImageID)
	if err != nil || img.State != domain.ImageDisabled {
		t.Fatalf("image %+v %v, want still disabled", img, err)
	}
}

func TestImageRequestsRefused(t *testing.T) {
	t.Parallel()
	e := newEnvWith(t, Config{}, Deps{Images: &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:c"}}})
	ctx := context.Background()
	cases := []struct {
		name string
		req  EnableImageRequest
		want error
	}{
		{"empty ref", EnableImageRequest{Org: domain.FirstOrg}, domain.ErrInvalid},
		{"bad ref", EnableImageRequest{Org: domain.FirstOrg, Ref: "UPPER/Case::x"}, domain.ErrInvalid},
		{"bad name", EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Name: "-x"}, domain.ErrInvalid},
		{"tiny memory", EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Config: ImageConfig{MemoryMiB: 16}}, domain.ErrInvalid},
		{"relative workdir", EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Config: ImageConfig{Workdir: "src"}}, domain.ErrInvalid},
		{"credentials without a key", EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1", Auth: &RegistryAuth{Token: "t"}}, domain.ErrInvalid},
	}
	for _, tc := range cases {
		if _, _, err := e.im.EnableImage(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, _, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/other:1", Name: "app"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another ref under a taken name: %v", err)
	}
	if _, err := e.co.CreateSession(ctx, domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg}, Image: "nope"}, ""); !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "no enabled image") {
		t.Fatalf("unknown image: %v", err)
	}
}

func TestImageSessionsOnlyOnCompatibleHosts(t *testing.T) {
	t.Parallel()
	imgs := &coordinatortest.Materializer{Digests: map[string]string{"reg/app:1": "sha256:d"}}
	e := newEnvWith(t, Config{PlacementWait: 300 * time.Millisecond}, Deps{Images: imgs})
	capID, _ := e.addHost(t, "capturer", 8)
	stop := e.keepAlive(t, capID)
	ctx := context.Background()
	_, job, err := e.im.EnableImage(ctx, EnableImageRequest{Org: domain.FirstOrg, Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobReady {
		t.Fatalf("job %+v", job)
	}
	stop()
	other := coordinatortest.TestFacts
	other.Backend.Version = "2"
	otherID, _ := e.addHostWith(t, "other", 8, other)
	e.keepAlive(t, otherID)
	if err := e.st.SetHostState(ctx, capID, domain.HostLost); err != nil {
		t.Fatal(err)
	}
	s, err := e.co.CreateSession(ctx, domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg}, Image: "app"}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := e.wait(t, s.ID, domain.SessionDead)
	if !strings.Contains(got.Reason, `fake "2", snapshot needs "1"`) {
		t.Fatalf("reason %q does not say the host is incompatible", got.Reason)
	}
}
