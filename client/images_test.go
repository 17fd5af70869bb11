package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
)

func TestImages(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, srv := newClient(t)

	req := apiv1.EnableImageRequest{Ref: "registry.example.com/team/web:1.4", MemoryMiB: 1024,
		Credentials: &apiv1.RegistryAuth{Username: "alice", Password: "pw"}}
	r, err := c.Images().Enable(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Image.Name != "web" || r.Image.State != "pending" || r.Job.State != "pending" || r.Image.Credentials != "alice@registry.example.com" {
		t.Errorf("enable = %+v", r)
	}
	if got := srv.EnableRequests(); len(got) != 1 || got[0].Credentials.Password != "pw" {
		t.Errorf("server got %+v, want the password sent", got)
	}

	var seen []string
	job, err := c.Images().WaitJob(ctx, r.Job.ID, time.Millisecond, func(j apiv1.ImageJob) { seen = append(seen, j.State+" "+j.Stage) })
	if err != nil || job.State != "ready" || job.StagesMS["warmup"] != 30500 {
		t.Fatalf("wait = %+v, %v", job, err)
	}
	want := []string{"pending ", "materializing resolve", "materializing pull", "materializing pull", "materializing rootfs", "capturing warmup", "ready "}
	if !slices.Equal(seen, want) {
		t.Errorf("progress %q, want %q", seen, want)
	}

	img, err := c.Images().Get(ctx, "web")
	if err != nil || img.State != "ready" || img.Digest != clienttest.ImageDigest || img.BaseSnapshotID != "base-"+job.ID {
		t.Errorf("get = %+v, %v", img, err)
	}
	again, err := c.Images().Enable(ctx, apiv1.EnableImageRequest{Ref: req.Ref})
	if err != nil || again.Job.ID != job.ID || again.Job.State != "ready" {
		t.Errorf("enable again = %+v, %v; want the ready job", again, err)
	}
	if _, err := c.Images().Enable(ctx, apiv1.EnableImageRequest{Ref: "other/web:2"}); !client.IsConflict(err) {
		t.Errorf("enable another ref under the name: %v, want a conflict", err)
	}
	ref, err := c.Images().Refresh(ctx, "web")
	if err != nil || ref.Job.Kind != "refresh" || ref.Job.ID == job.ID {
		t.Errorf("refresh = %+v, %v", ref, err)
	}
	jobs, err := c.Images().Jobs(ctx, "web")
	if err != nil || len(jobs) != 2 || jobs[0].ID != job.ID || jobs[1].Kind != "refresh" {
		t.Errorf("jobs = %+v, %v", jobs, err)
	}
	if d, err := c.Images().Disable(ctx, "web"); err != nil || d.State != "disabled" {
		t.Errorf("disable = %+v, %v", d, err)
	}
	if _, err := c.Images().Get(ctx, "web"); !client.IsNotFound(err) {
		t.Errorf("get disabled by name: %v, want not found", err)
	}
	for _, all := range []bool{false, true} {
		l, err := c.Images().List(ctx, all)
		if err != nil || len(l) != map[bool]int{false: 0, true: 1}[all] {
			t.Errorf("list all=%v = %+v, %v", all, l, err)
		}
	}
	if !slices.Contains(srv.Requests(), "GET /v1/images?all=true&limit=500") {
		t.Errorf("requests %v lack all=true", srv.Requests())
	}
	if _, err := c.Images().GetJob(ctx, "nope"); !client.IsNotFound(err) {
		t.Errorf("get unknown job: %v", err)
	}
}

// jobServer answers GET /v1/image-jobs/j1 with each status in turn (the
// last one stays); 200 answers a ready job.
func jobServer(t *testing.T, statuses ...int) (*client.Client, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1)) - 1
		st := statuses[min(i, len(statuses)-1)]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st)
		if st == 200 {
			_, _ = w.Write([]byte(`{"id":"j1","state":"ready"}`))
			return
		}
		_, _ = w.Write([]byte(`{"error":"nope","code":"` + map[int]string{503: "unavailable", 404: "not_found", 500: "internal"}[st] + `"}`))
	}))
	t.Cleanup(ts.Close)
	return client.New(ts.URL, "tok"), &n
}

func TestWaitImageJobErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		statuses []int
		state    string
		polls    int32
		check    func(error) bool
	}{
		{"retries while unavailable", []int{503, 503, 200}, "ready", 3, func(err error) bool { return err == nil }},
		{"gives up after 11 unavailable", []int{503}, "", 11, client.IsUnavailable},
		{"not found at once", []int{404}, "", 1, client.IsNotFound},
		{"internal at once", []int{500}, "", 1, func(err error) bool { return client.HasCode(err, client.CodeInternal) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, n := jobServer(t, tt.statuses...)
			j, err := c.Images().WaitJob(t.Context(), "j1", time.Millisecond, nil)
			if !tt.check(err) || j.State != tt.state || n.Load() != tt.polls {
				t.Errorf("wait = %q, %v after %d polls; want %q after %d", j.State, err, n.Load(), tt.state, tt.polls)
			}
		})
	}
}

func TestWaitImageJobCanceled(t *testing.T) {
	t.Parallel()
	c, srv := newClient(t)
	srv.ScriptImageJobs([]apiv1.ImageJob{{State: "capturing", Stage: "warmup"}})
	r, err := c.Images().Enable(t.Context(), apiv1.EnableImageRequest{Ref: "alpine:3"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	polls := 0
	j, err := c.Images().WaitJob(ctx, r.Job.ID, time.Millisecond, func(apiv1.ImageJob) { polls++ })
	if !errors.Is(err, context.DeadlineExceeded) || j.State != "capturing" || polls < 2 {
		t.Errorf("wait = %q, %v after %d polls; want capturing, deadline exceeded", j.State, err, polls)
	}
}
