package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/image"
	"github.com/engrams/engrams/internal/image/oci"
	"github.com/engrams/engrams/internal/store"
)

// fakeImages plays the materializer: each ref resolves to the digest in
// digests (a missing ref is oci.ErrNotFound); it counts materializations.
type fakeImages struct {
	mu      sync.Mutex
	digests map[string]string
	fail    map[string]error // ref -> Materialize error
	flaky   int              // Resolve calls still to fail in transit
	calls   int
	auth    []oci.Credentials
}

func (f *fakeImages) Resolve(_ context.Context, ref string, auth oci.Credentials) (oci.Resolved, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = append(f.auth, auth)
	if f.flaky > 0 {
		f.flaky--
		return oci.Resolved{}, fmt.Errorf("resolve %s: connection reset by peer", ref)
	}
	d, ok := f.digests[ref]
	if !ok {
		return oci.Resolved{}, fmt.Errorf("resolve %s: %w", ref, oci.ErrNotFound)
	}
	return oci.Resolved{Repository: "reg/app", Digest: d, Config: oci.ImageConfig{WorkingDir: "/work"}}, nil
}

func (f *fakeImages) Materialize(_ context.Context, req image.Request) (image.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err := f.fail[req.Ref]; err != nil {
		return image.Result{}, err
	}
	req.Progress(image.StagePull, 5, 10)
	d := req.Ref[strings.LastIndexByte(req.Ref, '@')+1:]
	return image.Result{Repository: "reg/app", Digest: d, Libc: image.LibcMusl,
		Config: oci.ImageConfig{Env: []string{"PATH=/usr/bin:/bin", "LANG=C"}, WorkingDir: "/work"},
		RootFS: chunk.Manifest{Version: 2, ChunkSize: chunk.DiskChunkSize, Size: 1 << 30}}, nil
}

// sealer is a reversible fake AEAD that checks associated data.
type sealer struct{}

func (sealer) Seal(p, ad []byte) ([]byte, error) { return append(append([]byte{}, ad...), p...), nil }
func (sealer) Open(c, ad []byte) ([]byte, error) {
	if !strings.HasPrefix(string(c), string(ad)) {
		return nil, errors.New("associated data differs")
	}
	return c[len(ad):], nil
}

func (h *fakeHost) capture(w http.ResponseWriter, r *http.Request, _ string) {
	var req hostlink.CaptureRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	h.captures = append(h.captures, req)
	if h.warmFail != "" {
		w.WriteHeader(http.StatusUnprocessableEntity)
		_ = json.NewEncoder(w).Encode(hostlink.ErrorBody{Code: hostlink.CodeWarmupFailed, Error: "warm-up exited with status 3", OutputTail: h.warmFail})
		return
	}
	ms := map[string]json.RawMessage{"memory": json.RawMessage(`{}`), hostlink.RoleRootFS: req.RootFS}
	raw, _ := json.Marshal(ms)
	_ = json.NewEncoder(w).Encode(hostlink.CaptureResponse{SnapshotID: req.SnapshotID, Manifests: raw, Facts: testFacts,
		StagesMS: map[string]int64{"boot": 30, "warmup": 20}})
}

// waitJob waits until the job is ready or failed.
func waitJob(t *testing.T, e *env, id string) domain.ImageJob {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := e.st.GetJob(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !j.State.Active() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s (%s)", id, j.State, j.Stage)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestImageEnableCapturesAndSessionsRestoreTheBase(t *testing.T) {
	t.Parallel()
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:aaa"}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs, Secrets: sealer{}})
	hostID, h := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	v, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1", Config: ImageConfig{Warmup: "echo warmed > /warm", Env: map[string]string{"LANG": "C.UTF-8"}},
		Auth: &RegistryAuth{Username: "u", Password: "p"}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Image.Name != "app" || v.State != ImagePending || v.Credential != "u@index.docker.io" {
		t.Fatalf("enable answered %+v", v)
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
	if len(imgs.auth) == 0 || imgs.auth[0].Username != "u" || imgs.auth[0].Password != "p" {
		t.Fatalf("credentials did not reach the puller: %v", imgs.auth)
	}
	if len(h.captures) != 1 || h.captures[0].Warmup != "echo warmed > /warm" || h.captures[0].Workdir != "/work" ||
		h.captures[0].Env["PATH"] != "/usr/bin:/bin" || h.captures[0].Env["LANG"] != "C.UTF-8" {
		t.Fatalf("capture request %+v", h.captures)
	}
	v, err = e.co.Image(ctx, "app")
	if err != nil || v.State != ImageReady || v.Config.Libc != image.LibcMusl || v.Image.BaseID == "" {
		t.Fatalf("image %+v %v", v, err)
	}

	s, err := e.co.CreateSession(ctx, domain.SessionSpec{Image: "app", Env: map[string]string{"LANG": "fr"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	e.wait(t, s.ID, domain.SessionActive)
	h.mu.Lock()
	last := h.starts[len(h.starts)-1]
	h.mu.Unlock()
	if last.Restore == nil || !last.Restore.Base || last.Restore.SnapshotID != v.Image.BaseID ||
		last.Spec.MemoryMiB != defaultImageMemoryMiB || last.Spec.Env["LANG"] != "fr" || last.Spec.Env["PATH"] != "/usr/bin:/bin" {
		t.Fatalf("start request %+v", last)
	}

	// Enabling the same digest under another name reuses the base at once.
	imgs.digests["reg/app:latest"] = "sha256:aaa"
	_, job2, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:latest", Name: "app2", Config: ImageConfig{Warmup: "echo warmed > /warm", Env: map[string]string{"LANG": "C.UTF-8"}}})
	if err != nil {
		t.Fatal(err)
	}
	if job2 = waitJob(t, e, job2.ID); job2.State != domain.JobReady || imgs.calls != 1 || len(h.captures) != 1 {
		t.Fatalf("re-enable of a ready digest: job %+v, %d materializations, %d captures", job2, imgs.calls, len(h.captures))
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
			imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:bbb"}, fail: map[string]error{"reg/app@sha256:bbb": tc.matErr}}
			e := newEnvWith(t, Config{}, Deps{Images: imgs})
			hostID, h := e.addHost(t, "a", 8)
			h.warmFail = tc.warmFail
			e.keepAlive(t, hostID)
			ctx := context.Background()
			_, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: tc.ref})
			if err != nil {
				t.Fatal(err)
			}
			job = waitJob(t, e, job.ID)
			if job.State != domain.JobFailed || !strings.Contains(job.Error, tc.wantErr) || job.OutputTail != tc.wantTail {
				t.Fatalf("job %+v, want failed with %q and tail %q", job, tc.wantErr, tc.wantTail)
			}
			v, err := e.co.Image(ctx, defaultImageName(tc.ref))
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
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:e"}, flaky: 2}
	e := newEnvWith(t, Config{ImagePullRetry: 10 * time.Millisecond}, Deps{Images: imgs})
	hostID, _ := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	_, job, err := e.co.EnableImage(context.Background(), EnableImageRequest{Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobReady || len(imgs.auth) != 3 {
		t.Fatalf("job %+v after %d resolves, want ready after 3", job, len(imgs.auth))
	}
	imgs.mu.Lock()
	imgs.flaky = 5
	imgs.mu.Unlock()
	_, job, err = e.co.EnableImage(context.Background(), EnableImageRequest{Ref: "reg/app:1", Name: "flaky"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobFailed || !strings.Contains(job.Error, "connection reset") {
		t.Fatalf("job %+v, want failed after %d attempts", job, pullAttempts)
	}
}

func TestImageReEnableAfterFailureTakesNewSettings(t *testing.T) {
	t.Parallel()
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:f"}, fail: map[string]error{"reg/app@sha256:f": fmt.Errorf("pull: %w", oci.ErrUnauthorized)}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs, Secrets: sealer{}})
	hostID, _ := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	_, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1", Auth: &RegistryAuth{Username: "u", Password: "wrong"}})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobFailed {
		t.Fatalf("first job %+v", job)
	}
	imgs.mu.Lock()
	delete(imgs.fail, "reg/app@sha256:f")
	imgs.mu.Unlock()
	v, job2, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1", Config: ImageConfig{MemoryMiB: 1024},
		Auth: &RegistryAuth{Username: "u", Password: "right"}})
	if err != nil || job2.ID == job.ID {
		t.Fatalf("re-enable: %+v %v", job2, err)
	}
	if job2 = waitJob(t, e, job2.ID); job2.State != domain.JobReady {
		t.Fatalf("second job %+v", job2)
	}
	imgs.mu.Lock()
	last := imgs.auth[len(imgs.auth)-1]
	imgs.mu.Unlock()
	if last.Password != "right" {
		t.Fatalf("the retry pulled with %q, not the new password", last.Password)
	}
	if v, err = e.co.Image(ctx, v.Image.Name); err != nil || v.Config.MemoryMiB != 1024 || v.State != ImageReady {
		t.Fatalf("image after re-enable: %+v %v", v, err)
	}
}

func TestImageDisabledDuringItsJobStaysDisabled(t *testing.T) {
	t.Parallel()
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:g"}}
	e := newEnvWith(t, Config{}, Deps{Images: imgs})
	hostID, h := e.addHost(t, "a", 8)
	e.keepAlive(t, hostID)
	ctx := context.Background()
	h.mu.Lock() // holds the capture until the image is disabled
	_, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1"})
	if err != nil {
		h.mu.Unlock()
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		j, err := e.st.GetJob(ctx, job.ID)
		if err == nil && j.State == domain.JobCapturing && j.Stage == "capture" {
			break // the capture is in flight, held by the host's lock
		}
		if time.Now().After(deadline) {
			h.mu.Unlock()
			t.Fatalf("job never reached its capture: %+v %v", j, err)
		}
	}
	if _, err := e.co.DisableImage(ctx, "app"); err != nil {
		h.mu.Unlock()
		t.Fatal(err)
	}
	h.mu.Unlock()
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
	e := newEnvWith(t, Config{}, Deps{Images: &fakeImages{digests: map[string]string{"reg/app:1": "sha256:c"}}})
	ctx := context.Background()
	cases := []struct {
		name string
		req  EnableImageRequest
		want error
	}{
		{"empty ref", EnableImageRequest{}, domain.ErrInvalid},
		{"bad ref", EnableImageRequest{Ref: "UPPER/Case::x"}, domain.ErrInvalid},
		{"bad name", EnableImageRequest{Ref: "reg/app:1", Name: "-x"}, domain.ErrInvalid},
		{"tiny memory", EnableImageRequest{Ref: "reg/app:1", Config: ImageConfig{MemoryMiB: 16}}, domain.ErrInvalid},
		{"relative workdir", EnableImageRequest{Ref: "reg/app:1", Config: ImageConfig{Workdir: "src"}}, domain.ErrInvalid},
		{"credentials without a key", EnableImageRequest{Ref: "reg/app:1", Auth: &RegistryAuth{Token: "t"}}, domain.ErrInvalid},
	}
	for _, tc := range cases {
		if _, _, err := e.co.EnableImage(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, _, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/other:1", Name: "app"}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("another ref under a taken name: %v", err)
	}
	if _, err := e.co.CreateSession(ctx, domain.SessionSpec{Image: "nope"}, ""); !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "no enabled image") {
		t.Fatalf("unknown image: %v", err)
	}
}

func TestImageSessionsOnlyOnCompatibleHosts(t *testing.T) {
	t.Parallel()
	imgs := &fakeImages{digests: map[string]string{"reg/app:1": "sha256:d"}}
	e := newEnvWith(t, Config{PlacementWait: 300 * time.Millisecond}, Deps{Images: imgs})
	capID, _ := e.addHost(t, "capturer", 8)
	stop := e.keepAlive(t, capID)
	ctx := context.Background()
	_, job, err := e.co.EnableImage(ctx, EnableImageRequest{Ref: "reg/app:1"})
	if err != nil {
		t.Fatal(err)
	}
	if job = waitJob(t, e, job.ID); job.State != domain.JobReady {
		t.Fatalf("job %+v", job)
	}
	stop()
	other := testFacts
	other.Backend.Version = "2"
	otherID, _ := e.addHostWith(t, "other", 8, other)
	e.keepAlive(t, otherID)
	if err := e.st.SetHostState(ctx, capID, domain.HostLost); err != nil {
		t.Fatal(err)
	}
	s, err := e.co.CreateSession(ctx, domain.SessionSpec{Image: "app"}, "")
	if err != nil {
		t.Fatal(err)
	}
	got := e.wait(t, s.ID, domain.SessionDead)
	if !strings.Contains(got.Reason, `fake "2", snapshot needs "1"`) {
		t.Fatalf("reason %q does not say the host is incompatible", got.Reason)
	}
}
