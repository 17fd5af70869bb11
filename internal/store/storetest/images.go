package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/store"
)

var imageTests = []test{
	{"ImageRoundTrip", testImageRoundTrip},
	{"ImageNameUnique", testImageNameUnique},
	{"ImageUpdate", testImageUpdate},
	{"ImageJobOneActive", testImageJobOneActive},
	{"ImageJobProgress", testImageJobProgress},
	{"ImageJobRejected", testImageJobRejected},
}

func newImage(name string) store.Image {
	return store.Image{
		ID: newID(), Name: name, Ref: "registry.example/team/" + name + ":latest",
		Config:    json.RawMessage(`{"env":["A=1"],"workdir":"/w","memory":1024,"vcpus":2,"disk":8,"warmup":"echo hi"}`),
		CreatedAt: t0,
	}
}

func createImage(t *testing.T, st store.Store, name string) store.Image {
	t.Helper()
	img := newImage(name)
	must(t, st.CreateImage(t.Context(), img))
	return img
}

func wantImage(t *testing.T, got, want store.Image) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Ref != want.Ref || got.Digest != want.Digest ||
		got.State != want.State || got.CredentialID != want.CredentialID {
		t.Fatalf("image = %+v, want %+v", got, want)
	}
	wantJSON(t, "config", got.Config, want.Config)
	wantJSON(t, "manifests", got.Manifests, want.Manifests)
	wantJSON(t, "facts", got.Facts, want.Facts)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	wantTime(t, "updated_at", got.UpdatedAt, want.UpdatedAt)
}

func testImageRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := createImage(t, st, "debian")
	a.State, a.UpdatedAt = store.ImageReady, t0
	b := newImage("alpine")
	b.Digest, b.CredentialID = "sha256:abc", "cred-1"
	b.Manifests, b.Facts = json.RawMessage(`{"memory":{"chunks":["aa"]}}`), json.RawMessage(`{"cpu":"x"}`)
	must(t, st.CreateImage(ctx, b))
	b.State, b.UpdatedAt = store.ImageReady, t0

	got, err := st.GetImage(ctx, a.ID)
	must(t, err)
	wantImage(t, got, a)
	if got.Manifests != nil || got.Facts != nil {
		t.Fatalf("manifests, facts = %s, %s; want nil before capture", got.Manifests, got.Facts)
	}
	got, err = st.GetImageByName(ctx, "alpine")
	must(t, err)
	wantImage(t, got, b)

	list, err := st.ListImages(ctx)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d images, want 2", len(list))
	}
	wantImage(t, list[0], b) // by name
	wantImage(t, list[1], a)

	_, err = st.GetImage(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetImageByName(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
}

func testImageNameUnique(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := createImage(t, st, "debian")
	wantErr(t, st.CreateImage(ctx, newImage("debian")), store.ErrConflict)
	dup := newImage("other")
	dup.ID = a.ID
	wantErr(t, st.CreateImage(ctx, dup), store.ErrConflict)

	// Disabling frees the name; the disabled row stays.
	must(t, st.SetImageState(ctx, a.ID, store.ImageDisabled, t0.Add(time.Second)))
	_, err := st.GetImageByName(ctx, "debian")
	wantErr(t, err, store.ErrNotFound)
	b := createImage(t, st, "debian")
	got, err := st.GetImageByName(ctx, "debian")
	must(t, err)
	if got.ID != b.ID {
		t.Fatalf("image named debian = %s, want %s", got.ID, b.ID)
	}
	old, err := st.GetImage(ctx, a.ID)
	must(t, err)
	if old.State != store.ImageDisabled {
		t.Fatalf("state = %s, want disabled", old.State)
	}
	wantTime(t, "updated_at", old.UpdatedAt, t0.Add(time.Second))
	// Enabling the old one again would give the name to two live images.
	wantErr(t, st.SetImageState(ctx, a.ID, store.ImageReady, t0), store.ErrConflict)
	wantErr(t, st.SetImageState(ctx, newID(), store.ImageDisabled, t0), store.ErrNotFound)
}

func testImageUpdate(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	other := createImage(t, st, "alpine")
	img.State = store.ImageReady
	img.Digest, img.CredentialID = "sha256:def", "cred-2"
	img.Manifests = json.RawMessage(`{"disk":{"chunks":["bb"]},"memory":{"chunks":["cc"]}}`)
	img.Facts = json.RawMessage(`{"kernel":"6.1","vmm":"qemu"}`)
	img.Config = json.RawMessage(`{"memory":2048}`)
	img.UpdatedAt = t0.Add(time.Minute)
	must(t, st.UpdateImage(ctx, img, img.UpdatedAt))
	got, err := st.GetImage(ctx, img.ID)
	must(t, err)
	wantImage(t, got, img)

	// Clearing optional fields stores NULLs, read back as empty.
	img.CredentialID, img.Manifests, img.Facts = "", nil, nil
	must(t, st.UpdateImage(ctx, img, img.UpdatedAt))
	got, err = st.GetImage(ctx, img.ID)
	must(t, err)
	wantImage(t, got, img)

	img.Name = other.Name
	wantErr(t, st.UpdateImage(ctx, img, t0), store.ErrConflict)
	missing := newImage("ghost")
	missing.State = store.ImageReady
	wantErr(t, st.UpdateImage(ctx, missing, t0), store.ErrNotFound)
	bad := got
	bad.Facts = json.RawMessage(`{`)
	if err := st.UpdateImage(ctx, bad, t0); err == nil {
		t.Fatal("UpdateImage accepted malformed JSON")
	}
}

func newJob(t *testing.T, st store.Store, imageID string, at time.Time) (store.ImageJob, error) {
	t.Helper()
	return st.CreateJob(t.Context(), store.ImageJob{ID: newID(), ImageID: imageID, Kind: store.ImageJobEnable, CreatedAt: at})
}

func testImageJobOneActive(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	other := createImage(t, st, "alpine")
	first, err := newJob(t, st, img.ID, t0)
	must(t, err)
	if first.State != store.JobPending {
		t.Fatalf("new job state = %s, want pending", first.State)
	}
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	// Another image's job is independent.
	_, err = newJob(t, st, other.ID, t0)
	must(t, err)
	// Still active while materializing or capturing.
	for _, state := range []store.ImageJobState{store.JobMaterializing, store.JobCapturing} {
		must(t, st.UpdateJobProgress(ctx, first.ID, state, "", 0, 0, t0))
		_, err = newJob(t, st, img.ID, t0)
		wantErr(t, err, store.ErrJobActive)
	}
	must(t, st.FinishJob(ctx, first.ID, store.JobFailed, "pull: unauthorized", "", t0.Add(time.Second)))
	second, err := newJob(t, st, img.ID, t0.Add(2*time.Second))
	must(t, err)
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	must(t, st.FinishJob(ctx, second.ID, store.JobReady, "", "", t0.Add(3*time.Second)))
	_, err = newJob(t, st, img.ID, t0.Add(4*time.Second))
	must(t, err)

	jobs, err := st.ListJobs(ctx, img.ID)
	must(t, err)
	var states []store.ImageJobState
	for _, j := range jobs {
		states = append(states, j.State)
	}
	if len(states) != 3 || states[0] != store.JobFailed || states[1] != store.JobReady || states[2] != store.JobPending {
		t.Fatalf("job states = %v, want [failed ready pending]", states)
	}
	if jobs[0].ID != first.ID || jobs[1].ID != second.ID {
		t.Fatal("jobs not listed oldest first")
	}
	if jobs, err := st.ListJobs(ctx, newID()); err != nil || len(jobs) != 0 {
		t.Fatalf("ListJobs(unknown) = %v, %v; want none", jobs, err)
	}
}

func testImageJobProgress(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := st.CreateJob(ctx, store.ImageJob{ID: newID(), ImageID: img.ID, Kind: store.ImageJobRefresh, CreatedAt: t0})
	must(t, err)
	must(t, st.UpdateJobProgress(ctx, j.ID, store.JobMaterializing, "pull", 10, 100, t0.Add(time.Second)))
	must(t, st.UpdateJobProgress(ctx, j.ID, store.JobMaterializing, "flatten", 60, 100, t0.Add(2*time.Second)))
	must(t, st.UpdateJobProgress(ctx, j.ID, store.JobCapturing, "warmup", 0, 0, t0.Add(3*time.Second)))
	got, err := st.GetJob(ctx, j.ID)
	must(t, err)
	if got.State != store.JobCapturing || got.Stage != "warmup" || got.BytesDone != 0 || got.BytesTotal != 0 ||
		got.Attempts != 1 || got.Kind != store.ImageJobRefresh || got.ImageID != img.ID {
		t.Fatalf("job = %+v", got)
	}
	must(t, st.UpdateJobProgress(ctx, j.ID, store.JobCapturing, "snapshot", 5, 7, t0.Add(4*time.Second)))
	got, err = st.GetJob(ctx, j.ID)
	must(t, err)
	if got.Stage != "snapshot" || got.BytesDone != 5 || got.BytesTotal != 7 {
		t.Fatalf("job = %+v, want stage snapshot 5/7", got)
	}
	wantTime(t, "created_at", got.CreatedAt, t0)
	wantTime(t, "updated_at", got.UpdatedAt, t0.Add(4*time.Second))

	tail := "line 1\nline 2: warmup timed out\n"
	must(t, st.FinishJob(ctx, j.ID, store.JobFailed, "warmup: stalled", tail, t0.Add(5*time.Second)))
	got, err = st.GetJob(ctx, j.ID)
	must(t, err)
	if got.State != store.JobFailed || got.Error != "warmup: stalled" || got.OutputTail != tail {
		t.Fatalf("finished job = %+v", got)
	}
	wantTime(t, "updated_at", got.UpdatedAt, t0.Add(5*time.Second))

	// A finished job takes no more writes.
	wantErr(t, st.UpdateJobProgress(ctx, j.ID, store.JobCapturing, "x", 1, 1, t0), store.ErrConflict)
	wantErr(t, st.FinishJob(ctx, j.ID, store.JobReady, "", "", t0), store.ErrConflict)
	wantErr(t, st.UpdateJobProgress(ctx, newID(), store.JobCapturing, "x", 1, 1, t0), store.ErrNotFound)
	wantErr(t, st.FinishJob(ctx, newID(), store.JobReady, "", "", t0), store.ErrNotFound)
	_, err = st.GetJob(ctx, newID())
	wantErr(t, err, store.ErrNotFound)
}

func testImageJobRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	_, err := newJob(t, st, newID(), t0)
	wantErr(t, err, store.ErrNotFound)
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	must(t, st.FinishJob(ctx, j.ID, store.JobReady, "", "", t0))
	_, err = st.CreateJob(ctx, store.ImageJob{ID: j.ID, ImageID: img.ID, Kind: store.ImageJobEnable, CreatedAt: t0})
	wantErr(t, err, store.ErrConflict)
	if _, err := st.CreateJob(ctx, store.ImageJob{ID: newID(), ImageID: img.ID, Kind: "rebuild"}); err == nil {
		t.Fatal("CreateJob accepted an unknown kind")
	}
	k, err := newJob(t, st, img.ID, t0)
	must(t, err)
	if err := st.UpdateJobProgress(ctx, k.ID, store.JobReady, "", 0, 0, t0); err == nil {
		t.Fatal("UpdateJobProgress accepted a final state")
	}
	if err := st.FinishJob(ctx, k.ID, store.JobCapturing, "", "", t0); err == nil {
		t.Fatal("FinishJob accepted an active state")
	}
}
