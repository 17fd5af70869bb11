package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/store"
)

const (
	testToken = "egr_test"
	secretPW  = "hunter2-pw-s3cret"
	secretTok = "ghp_tok3n-s3cret"
)

var t0 = time.Date(2026, 11, 30, 6, 0, 0, 0, time.UTC)

// fakeStore admits testToken; the API's other store methods are not used
// by image routes (the embedded nil interface panics if they are).
type fakeStore struct {
	api.FleetStore
	api.AccessStore
}

func (fakeStore) TokenByHash(_ context.Context, hash string) (domain.Token, error) {
	if hash == coordinator.HashToken(testToken) {
		return domain.Token{ID: "t1", Kind: domain.TokenUser, OrgID: domain.FirstOrg, UserID: domain.FirstOwner, Role: domain.RoleOwner}, nil
	}
	return domain.Token{}, store.ErrNotFound
}

func (fakeStore) TouchToken(context.Context, string, time.Time) error { return nil }

func (fakeStore) GetUser(context.Context, domain.UserID) (domain.User, error) {
	return domain.User{ID: domain.FirstOwner, Name: "owner", FleetOperator: true}, nil
}

func (fakeStore) GetMember(context.Context, domain.OrgID, domain.UserID) (domain.Member, error) {
	return domain.Member{OrgID: domain.FirstOrg, User: domain.User{ID: domain.FirstOwner}, Role: domain.RoleOwner}, nil
}

// fakeImages is a coordinator holding image "web" (ready) with two jobs and
// "old" (disabled). Only the image methods are implemented.
type fakeImages struct {
	mu        sync.Mutex
	enabled   []imagejobs.EnableImageRequest // requests received
	enableJob domain.ImageJob                // job EnableImage answers with
	err       error                          // every method fails with it when set
}

func newFakeImages() *fakeImages {
	return &fakeImages{enableJob: domain.ImageJob{ID: "j9", ImageID: "i9", Kind: domain.ImageJobEnable, State: domain.JobPending, CreatedAt: t0}}
}

var webJobs = []domain.ImageJob{
	{ID: "j1", ImageID: "i1", Kind: domain.ImageJobEnable, State: domain.JobFailed, Error: "warm-up exited 1", OutputTail: "npm ERR!",
		Attempts: 1, CreatedAt: t0, UpdatedAt: t0.Add(time.Minute)}, // no stage times
	{ID: "j2", ImageID: "i1", Kind: domain.ImageJobEnable, State: domain.JobReady, Attempts: 1, CreatedAt: t0.Add(time.Hour),
		Stages: json.RawMessage(`{"pull":1500,"rootfs":800,"warmup":12000}`), Warnings: []string{"left out 1 device node: /dev/null"}},
	{ID: "j3", ImageID: "i1", Kind: domain.ImageJobRefresh, State: domain.JobMaterializing, Stage: "pull",
		BytesDone: 45, BytesTotal: 100, Stages: json.RawMessage(`not json`)},
}

func webView() imagejobs.ImageView {
	last := webJobs[1]
	return imagejobs.ImageView{
		Image: domain.Image{ID: "i1", Org: domain.FirstOrg, Name: "web", Ref: "registry.example.com/team/web:1.4", Digest: "sha256:abc",
			State: domain.ImageReady, CredentialID: "cred1", BaseID: "base1", CreatedAt: t0, UpdatedAt: t0},
		Config:     imagejobs.ImageConfig{MemoryMiB: 1024, VCPUs: 2, DiskGiB: 8, Warmup: "npm ci", WarmupTimeoutS: 600, WarmupStallS: 120, ImageEnv: []string{"PATH=/bin"}},
		State:      imagejobs.ImageReady,
		Credential: "alice@registry.example.com",
		Facts:      &domain.HostFacts{Arch: "amd64"},
		ReadyHosts: []domain.HostID{"h1"},
		LastJob:    &last,
	}
}

func (f *fakeImages) EnableImage(_ context.Context, req imagejobs.EnableImageRequest) (imagejobs.ImageView, domain.ImageJob, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.enabled = append(f.enabled, req)
	if f.err != nil {
		return imagejobs.ImageView{}, domain.ImageJob{}, f.err
	}
	v := imagejobs.ImageView{Image: domain.Image{ID: "i9", Org: domain.FirstOrg, Name: req.Name, Ref: req.Ref, CredentialID: "c9"},
		Config: req.Config, State: imagejobs.ImagePending, Credential: "alice@registry.example.com"}
	return v, f.enableJob, nil
}

func (f *fakeImages) RefreshImage(ctx context.Context, _ domain.OrgID, name string) (imagejobs.ImageView, domain.ImageJob, error) {
	v, err := f.Image(ctx, "", name)
	return v, webJobs[2], err
}

func (f *fakeImages) DisableImage(ctx context.Context, _ domain.OrgID, name string) (imagejobs.ImageView, error) {
	v, err := f.Image(ctx, "", name)
	v.State = imagejobs.ImageDisabled
	return v, err
}

func (f *fakeImages) Image(_ context.Context, _ domain.OrgID, name string) (imagejobs.ImageView, error) {
	switch {
	case f.err != nil:
		return imagejobs.ImageView{}, f.err
	case name == "web" || name == "i1":
		return webView(), nil
	}
	return imagejobs.ImageView{}, fmt.Errorf("image %q: %w", name, store.ErrNotFound)
}

func (f *fakeImages) Images(_ context.Context, _ domain.OrgID, all bool) ([]imagejobs.ImageView, error) {
	out := []imagejobs.ImageView{webView()}
	if all {
		out = append(out, imagejobs.ImageView{Image: domain.Image{ID: "i0", Org: domain.FirstOrg, Name: "old", State: domain.ImageDisabled}, State: imagejobs.ImageDisabled})
	}
	return out, f.err
}

func (f *fakeImages) Defaults() imagejobs.ImageDefaults {
	return imagejobs.ImageDefaults{MemoryMiB: 512, VCPUs: 1, DiskGiB: 4, WarmupTimeoutS: 600, WarmupStallS: 120, MaxMemoryMiB: 16384, MaxVCPUs: 16, MaxDiskGiB: 256}
}

func (f *fakeImages) ImageJobs(ctx context.Context, _ domain.OrgID, name string) ([]domain.ImageJob, error) {
	if _, err := f.Image(ctx, "", name); err != nil {
		return nil, err
	}
	return webJobs, nil
}

func (f *fakeImages) ImageJob(_ context.Context, _ domain.OrgID, id domain.ImageJobID) (domain.ImageJob, error) {
	for _, j := range webJobs {
		if j.ID == id {
			return j, nil
		}
	}
	return domain.ImageJob{}, fmt.Errorf("image job %s: %w", id, store.ErrNotFound)
}

// serve sends one request to an API over co and returns the answer and
// everything logged.
func serve(t *testing.T, co api.ImageService, method, target, body string) (*httptest.ResponseRecorder, string) {
	t.Helper()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	srv := api.New(api.Config{}, api.Deps{Images: co, Fleet: fakeStore{}, Access: fakeStore{}, Logger: log})
	req := httptest.NewRequest(method, target, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec, logs.String()
}

func TestEnableImage(t *testing.T) {
	t.Parallel()
	full := `{"ref":"registry.example.com/team/web:1.4","name":"web","env":{"A":"1"},"memory_mib":1024,"vcpus":2,"disk_gib":8,` +
		`"workdir":"/app","warmup":"npm ci","warmup_timeout_s":900,"warmup_stall_s":60,` +
		`"credentials":{"username":"alice","password":"` + secretPW + `","token":"` + secretTok + `"}}`
	tests := []struct {
		name     string
		body     string
		job      domain.ImageJobState
		err      error
		status   int
		contains []string
	}{
		{name: "accepted", body: full, status: http.StatusAccepted,
			contains: []string{`"state":"pending"`, `"name":"web"`, `"credentials":"alice@registry.example.com"`, `"id":"j9"`}},
		{name: "already ready", body: full, job: domain.JobReady, status: http.StatusOK, contains: []string{`"job":{"id":"j9"`, `"state":"ready"`}},
		{name: "malformed", body: `{"ref":`, status: http.StatusBadRequest, contains: []string{"malformed JSON body: the body ends early"}},
		{name: "unknown field", body: `{"ref":"x","credentials":{"pasword":"` + secretPW + `"}}`, status: http.StatusBadRequest,
			contains: []string{`unknown field \"pasword\"`}},
		{name: "unknown top field", body: `{"ref":"x","memroy_mib":1}`, status: http.StatusBadRequest, contains: []string{`unknown field \"memroy_mib\"`}},
		{name: "trailing data", body: `{"ref":"x"} {}`, status: http.StatusBadRequest, contains: []string{"trailing data"}},
		{name: "secret of wrong type", body: `{"ref":"x","credentials":{"password":987654321}}`, status: http.StatusBadRequest,
			contains: []string{"field credentials.password: want a string"}},
		{name: "syntax error in secret", body: `{"ref":"x","credentials":{"password":"` + secretPW + `"` + "\x01" + `}}`, status: http.StatusBadRequest,
			contains: []string{"invalid JSON at byte"}},
		{name: "not an object", body: `["` + secretPW + `"]`, status: http.StatusBadRequest, contains: []string{"want a JSON object"}},
		{name: "invalid", body: full, err: fmt.Errorf("%w: memory_mib 1 out of range", domain.ErrInvalid), status: http.StatusBadRequest,
			contains: []string{`"code":"bad_request"`, "memory_mib 1 out of range"}},
		{name: "name taken", body: full, err: fmt.Errorf("%w: image name \"web\" is taken", store.ErrConflict), status: http.StatusConflict,
			contains: []string{`"code":"conflict"`}},
		{name: "internal", body: full, err: fmt.Errorf("enable image web: disk on fire"), status: http.StatusInternalServerError,
			contains: []string{`"code":"internal"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			co := newFakeImages()
			co.err = tt.err
			if tt.job != "" {
				co.enableJob.State = tt.job
			}
			rec, logs := serve(t, co, http.MethodPost, "/v1/images", tt.body)
			body := rec.Body.String()
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d: %s", rec.Code, tt.status, body)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %s: %s", s, body)
				}
			}
			for _, secret := range []string{secretPW, secretTok, "987654321"} {
				if strings.Contains(body, secret) || strings.Contains(logs, secret) {
					t.Errorf("secret %q echoed:\nbody: %s\nlogs: %s", secret, body, logs)
				}
			}
		})
	}
}

// TestEnableImagePassesEverything checks the coordinator gets the whole
// request, credentials included.
func TestEnableImagePassesEverything(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want imagejobs.EnableImageRequest
	}{
		{"full", `{"ref":"r/web:1","name":"web","env":{"A":"1"},"memory_mib":1024,"vcpus":2,"disk_gib":8,"workdir":"/app",` +
			`"warmup":"make","warmup_timeout_s":900,"warmup_stall_s":60,"credentials":{"username":"u","password":"p","token":"t"}}`,
			imagejobs.EnableImageRequest{Org: domain.FirstOrg, Ref: "r/web:1", Name: "web", Config: imagejobs.ImageConfig{Env: map[string]string{"A": "1"},
				MemoryMiB: 1024, VCPUs: 2, DiskGiB: 8, Workdir: "/app", Warmup: "make", WarmupTimeoutS: 900, WarmupStallS: 60},
				Auth: &imagejobs.RegistryAuth{Username: "u", Password: "p", Token: "t"}}},
		{"anonymous", `{"ref":"alpine:3"}`, imagejobs.EnableImageRequest{Org: domain.FirstOrg, Ref: "alpine:3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			co := newFakeImages()
			if rec, _ := serve(t, co, http.MethodPost, "/v1/images", tt.body); rec.Code != http.StatusAccepted {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			got, _ := json.Marshal(co.enabled)
			want, _ := json.Marshal([]imagejobs.EnableImageRequest{tt.want})
			if string(got) != string(want) {
				t.Errorf("coordinator got %s\nwant %s", got, want)
			}
		})
	}
}

func TestImageRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		method   string
		target   string
		err      error
		status   int
		contains []string
		lacks    []string
	}{
		{name: "list", method: "GET", target: "/v1/images", status: 200,
			contains: []string{`"items":[{"id":"i1","name":"web"`, `"base_snapshot_id":"base1"`, `"digest":"sha256:abc"`, `"ready_hosts":["h1"]`,
				`"facts":{`, `"last_job":{"id":"j2"`, `"stages_ms":{"pull":1500,"rootfs":800,"warmup":12000}`, `"memory_mib":1024`,
				`"defaults":{"memory_mib":512,"vcpus":1,"disk_gib":4,"warmup_timeout_s":600,"warmup_stall_s":120,"max_memory_mib":16384,"max_vcpus":16,"max_disk_gib":256}`},
			lacks: []string{`"old"`, "image_env", "cred1"}},
		{name: "list all", method: "GET", target: "/v1/images?all=true", status: 200, contains: []string{`"name":"old"`, `"state":"disabled"`}},
		{name: "list bad all", method: "GET", target: "/v1/images?all=maybe", status: 400, contains: []string{`all=\"maybe\": want true or false`}},
		{name: "list fails", method: "GET", target: "/v1/images", err: context.DeadlineExceeded, status: 504},
		{name: "get", method: "GET", target: "/v1/images/web", status: 200, contains: []string{`"name":"web"`, `"credentials":"alice@registry.example.com"`}},
		{name: "get unknown", method: "GET", target: "/v1/images/nope", status: 404, contains: []string{`"code":"not_found"`, `image \"nope\"`}},
		{name: "disable", method: "DELETE", target: "/v1/images/web", status: 200, contains: []string{`"state":"disabled"`}},
		{name: "disable unknown", method: "DELETE", target: "/v1/images/nope", status: 404},
		{name: "refresh", method: "POST", target: "/v1/images/web/refresh", status: 202,
			contains: []string{`"job":{"id":"j3"`, `"kind":"refresh"`, `"stage":"pull"`, `"bytes_done":45`, `"bytes_total":100`}},
		{name: "refresh disabled", method: "POST", target: "/v1/images/web/refresh", err: fmt.Errorf("%w: image web is disabled", store.ErrConflict), status: 409},
		{name: "job", method: "GET", target: "/v1/image-jobs/j1", status: 200,
			contains: []string{`"state":"failed"`, `"error":"warm-up exited 1"`, `"output_tail":"npm ERR!"`}, lacks: []string{"stages_ms"}},
		{name: "job unknown", method: "GET", target: "/v1/image-jobs/j0", status: 404},
		{name: "jobs unknown image", method: "GET", target: "/v1/images/nope/jobs", status: 404},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			co := newFakeImages()
			co.err = tt.err
			rec, _ := serve(t, co, tt.method, tt.target, "")
			body := rec.Body.String()
			if rec.Code != tt.status {
				t.Errorf("status %d, want %d: %s", rec.Code, tt.status, body)
			}
			for _, s := range tt.contains {
				if !strings.Contains(body, s) {
					t.Errorf("body lacks %s: %s", s, body)
				}
			}
			for _, s := range tt.lacks {
				if strings.Contains(body, s) {
					t.Errorf("body has %s: %s", s, body)
				}
			}
		})
	}
}

// TestImageJobsConversion checks every field of the job list, with stage
// times that are missing or do not decode left out.
func TestImageJobsConversion(t *testing.T) {
	t.Parallel()
	rec, _ := serve(t, newFakeImages(), "GET", "/v1/images/web/jobs", "")
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got apiv1.ImageJobList
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	want := apiv1.ImageJobList{Items: []apiv1.ImageJob{
		{ID: "j1", ImageID: "i1", Kind: "enable", State: "failed", Attempts: 1, Error: "warm-up exited 1", OutputTail: "npm ERR!",
			CreatedAt: t0, UpdatedAt: t0.Add(time.Minute)},
		{ID: "j2", ImageID: "i1", Kind: "enable", State: "ready", Attempts: 1, CreatedAt: t0.Add(time.Hour),
			StagesMS: map[string]int64{"pull": 1500, "rootfs": 800, "warmup": 12000}, Warnings: []string{"left out 1 device node: /dev/null"}},
		{ID: "j3", ImageID: "i1", Kind: "refresh", State: "materializing", Stage: "pull", BytesDone: 45, BytesTotal: 100},
	}}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("jobs:\n%s\nwant:\n%s", g, w)
	}
}

// AppendAudit keeps nothing: these tests do not read the audit log.
func (fakeStore) AppendAudit(context.Context, domain.AuditEvent) error { return nil }
