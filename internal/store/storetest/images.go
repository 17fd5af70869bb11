package storetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var imageTests = []test{
	{"ImageRoundTrip", testImageRoundTrip},
	{"ImageNameUnique", testImageNameUnique},
	{"ImagesBelongToTheirOrganisation", testImageOrgs},
	{"ImageUpdate", testImageUpdate},
	{"ImageJobOneActive", testImageJobOneActive},
	{"ImageJobProgress", testImageJobProgress},
	{"ImageJobRejected", testImageJobRejected},
	{"ImageJobClaim", testImageJobClaim},
	{"ImageJobReclaimFences", testImageJobReclaimFences},
	{"ImageJobWarnings", testImageJobWarnings},
	{"ImageJobClaimRace", func(t *testing.T, st store.Store) { ClaimJobConcurrently(t, []store.Store{st}, 8, 10) }},
	{"ImageJobListClaimable", testImageJobListClaimable},
	{"CompleteImageJob", testCompleteImageJob},
	{"CompleteImageJobWritesNothing", testCompleteImageJobWritesNothing},
	{"Credentials", testCredentials},
	{"CredentialErrors", testCredentialErrors},
}

func newImage(name string) domain.Image {
	return domain.Image{
		ID: newImageID(), Org: domain.FirstOrg, Name: name, Ref: "registry.example/team/" + name + ":latest",
		Config:    json.RawMessage(`{"env":["A=1"],"workdir":"/w","memory":1024,"vcpus":2,"disk":8,"warmup":"echo hi"}`),
		CreatedAt: t0,
	}
}

func createImage(t *testing.T, st store.Store, name string) domain.Image {
	t.Helper()
	img := newImage(name)
	must(t, st.CreateImage(t.Context(), img))
	return img
}

func wantImage(t *testing.T, got, want domain.Image) {
	t.Helper()
	if got.ID != want.ID || got.Name != want.Name || got.Ref != want.Ref || got.Digest != want.Digest ||
		got.State != want.State || got.CredentialID != want.CredentialID || got.BaseID != want.BaseID {
		t.Fatalf("image = %+v, want %+v", got, want)
	}
	wantJSON(t, "config", got.Config, want.Config)
	wantJSON(t, "manifests", got.Manifests, want.Manifests)
	wantSame(t, "facts", got.Facts, want.Facts)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	wantTime(t, "updated_at", got.UpdatedAt, want.UpdatedAt)
}

func testImageRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := createImage(t, st, "debian")
	a.State, a.UpdatedAt = domain.ImageReady, t0
	b := newImage("alpine")
	b.Digest, b.CredentialID, b.BaseID = "sha256:abc", "cred-1", "snap-base-1"
	b.Manifests, b.Facts = json.RawMessage(`{"memory":{"chunks":["aa"]}}`), domain.HostFacts{CPUModel: "x"}
	must(t, st.CreateImage(ctx, b))
	b.State, b.UpdatedAt = domain.ImageReady, t0

	got, err := st.GetImage(ctx, a.ID)
	must(t, err)
	wantImage(t, got, a)
	if got.Manifests != nil || !reflect.ValueOf(got.Facts).IsZero() || got.BaseID != "" {
		t.Fatalf("manifests, facts, base = %s, %+v, %q; want none before capture", got.Manifests, got.Facts, got.BaseID)
	}
	got, err = st.GetImageByName(ctx, domain.FirstOrg, "alpine")
	must(t, err)
	wantImage(t, got, b)

	list, err := st.ListImages(ctx, domain.FirstOrg)
	must(t, err)
	if len(list) != 2 {
		t.Fatalf("listed %d images, want 2", len(list))
	}
	wantImage(t, list[0], b) // by name
	wantImage(t, list[1], a)

	_, err = st.GetImage(ctx, newImageID())
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetImageByName(ctx, domain.FirstOrg, "nope")
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
	must(t, st.SetImageState(ctx, a.ID, domain.ImageDisabled, t0.Add(time.Second)))
	_, err := st.GetImageByName(ctx, domain.FirstOrg, "debian")
	wantErr(t, err, store.ErrNotFound)
	b := createImage(t, st, "debian")
	got, err := st.GetImageByName(ctx, domain.FirstOrg, "debian")
	must(t, err)
	if got.ID != b.ID {
		t.Fatalf("image named debian = %s, want %s", got.ID, b.ID)
	}
	old, err := st.GetImage(ctx, a.ID)
	must(t, err)
	if old.State != domain.ImageDisabled {
		t.Fatalf("state = %s, want disabled", old.State)
	}
	wantTime(t, "updated_at", old.UpdatedAt, t0.Add(time.Second))
	// Enabling the old one again would give the name to two live images.
	wantErr(t, st.SetImageState(ctx, a.ID, domain.ImageReady, t0), store.ErrConflict)
	wantErr(t, st.SetImageState(ctx, newImageID(), domain.ImageDisabled, t0), store.ErrNotFound)
}

func testImageUpdate(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	other := createImage(t, st, "alpine")
	img.State = domain.ImageReady
	img.Digest, img.CredentialID, img.BaseID = "sha256:def", "cred-2", "snap-base-2"
	img.Manifests = json.RawMessage(`{"disk":{"chunks":["bb"]},"memory":{"chunks":["cc"]}}`)
	img.Facts = domain.HostFacts{Kernel: "6.1", Backend: domain.BackendFacts{Name: "qemu"}}
	img.Config = json.RawMessage(`{"memory":2048}`)
	img.UpdatedAt = t0.Add(time.Minute)
	must(t, st.UpdateImage(ctx, img, img.UpdatedAt))
	got, err := st.GetImage(ctx, img.ID)
	must(t, err)
	wantImage(t, got, img)

	// Clearing optional fields stores NULLs, read back as empty.
	img.CredentialID, img.Manifests, img.Facts, img.BaseID = "", nil, domain.HostFacts{}, ""
	must(t, st.UpdateImage(ctx, img, img.UpdatedAt))
	got, err = st.GetImage(ctx, img.ID)
	must(t, err)
	wantImage(t, got, img)

	img.Name = other.Name
	wantErr(t, st.UpdateImage(ctx, img, t0), store.ErrConflict)
	missing := newImage("ghost")
	missing.State = domain.ImageReady
	wantErr(t, st.UpdateImage(ctx, missing, t0), store.ErrNotFound)
	bad := got
	bad.Manifests = json.RawMessage(`{`)
	if err := st.UpdateImage(ctx, bad, t0); err == nil {
		t.Fatal("UpdateImage accepted malformed JSON")
	}
}

func newJob(t *testing.T, st store.Store, imageID domain.ImageID, at time.Time) (domain.ImageJob, error) {
	t.Helper()
	return st.CreateJob(t.Context(), domain.ImageJob{ID: newImageJobID(), ImageID: imageID, Kind: domain.ImageJobEnable, CreatedAt: at})
}

// claimJob claims job id at at for a minute.
func claimJob(t *testing.T, st store.Store, id domain.ImageJobID, at time.Time) domain.ImageJob {
	t.Helper()
	j, err := st.ClaimJob(t.Context(), id, time.Minute, at)
	must(t, err)
	return j
}

// progress is a fenced progress write of a claimed job with no options.
func progress(j domain.ImageJob, state domain.ImageJobState, stage string, done, total int64) store.JobProgress {
	return store.JobProgress{ID: j.ID, Epoch: j.Epoch, State: state, Stage: stage, Done: done, Total: total}
}

func testImageJobOneActive(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	other := createImage(t, st, "alpine")
	first, err := newJob(t, st, img.ID, t0)
	must(t, err)
	if first.State != domain.JobPending || first.Epoch != 0 || !first.LeaseUntil.IsZero() {
		t.Fatalf("new job = %+v, want pending, epoch 0, no lease", first)
	}
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	// Another image's job is independent.
	_, err = newJob(t, st, other.ID, t0)
	must(t, err)
	// Still active while materializing or capturing.
	c := claimJob(t, st, first.ID, t0)
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	must(t, st.UpdateJobProgress(ctx, progress(c, domain.JobCapturing, "", 0, 0), t0))
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	must(t, st.FinishJob(ctx, first.ID, c.Epoch, domain.JobFailed, "pull: unauthorized", "", nil, t0.Add(time.Second)))
	second, err := newJob(t, st, img.ID, t0.Add(2*time.Second))
	must(t, err)
	_, err = newJob(t, st, img.ID, t0)
	wantErr(t, err, store.ErrJobActive)
	c = claimJob(t, st, second.ID, t0.Add(2*time.Second))
	must(t, st.FinishJob(ctx, second.ID, c.Epoch, domain.JobReady, "", "", nil, t0.Add(3*time.Second)))
	_, err = newJob(t, st, img.ID, t0.Add(4*time.Second))
	must(t, err)

	jobs, err := st.ListJobs(ctx, img.ID)
	must(t, err)
	var states []domain.ImageJobState
	for _, j := range jobs {
		states = append(states, j.State)
	}
	if len(states) != 3 || states[0] != domain.JobFailed || states[1] != domain.JobReady || states[2] != domain.JobPending {
		t.Fatalf("job states = %v, want [failed ready pending]", states)
	}
	if jobs[0].ID != first.ID || jobs[1].ID != second.ID {
		t.Fatal("jobs not listed oldest first")
	}
	if jobs, err := st.ListJobs(ctx, newImageID()); err != nil || len(jobs) != 0 {
		t.Fatalf("ListJobs(unknown) = %v, %v; want none", jobs, err)
	}
}

func testImageJobProgress(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := st.CreateJob(ctx, domain.ImageJob{ID: newImageJobID(), ImageID: img.ID, Kind: domain.ImageJobRefresh, CreatedAt: t0})
	must(t, err)
	c := claimJob(t, st, j.ID, t0.Add(time.Second))
	p := progress(c, domain.JobMaterializing, "pull", 10, 100)
	p.Digest, p.LeaseUntil = "sha256:aaa", t0.Add(time.Hour)
	p.Stages = json.RawMessage(`{"resolve":12}`)
	must(t, st.UpdateJobProgress(ctx, p, t0.Add(time.Second)))
	must(t, st.UpdateJobProgress(ctx, progress(c, domain.JobMaterializing, "flatten", 60, 100), t0.Add(2*time.Second)))
	must(t, st.UpdateJobProgress(ctx, progress(c, domain.JobCapturing, "warmup", 0, 0), t0.Add(3*time.Second)))
	got, err := st.GetJob(ctx, j.ID)
	must(t, err)
	if got.State != domain.JobCapturing || got.Stage != "warmup" || got.BytesDone != 0 || got.BytesTotal != 0 ||
		got.Attempts != 1 || got.Epoch != c.Epoch || got.Kind != domain.ImageJobRefresh || got.ImageID != img.ID {
		t.Fatalf("job = %+v", got)
	}
	// Zero lease, "" digest and nil stages kept what was recorded.
	if got.Digest != "sha256:aaa" {
		t.Fatalf("digest = %q, want the recorded sha256:aaa", got.Digest)
	}
	wantJSON(t, "stages", got.Stages, json.RawMessage(`{"resolve":12}`))
	wantTime(t, "lease_until", got.LeaseUntil, t0.Add(time.Hour))

	p = progress(c, domain.JobCapturing, "snapshot", 5, 7)
	p.Stages, p.LeaseUntil = json.RawMessage(`{"resolve":12,"pull":340}`), t0.Add(2*time.Hour)
	must(t, st.UpdateJobProgress(ctx, p, t0.Add(4*time.Second)))
	got, err = st.GetJob(ctx, j.ID)
	must(t, err)
	if got.Stage != "snapshot" || got.BytesDone != 5 || got.BytesTotal != 7 {
		t.Fatalf("job = %+v, want stage snapshot 5/7", got)
	}
	wantJSON(t, "stages", got.Stages, p.Stages)
	wantTime(t, "lease_until", got.LeaseUntil, t0.Add(2*time.Hour))
	wantTime(t, "created_at", got.CreatedAt, t0)
	wantTime(t, "updated_at", got.UpdatedAt, t0.Add(4*time.Second))

	tail := "line 1\nline 2: warmup timed out\n"
	stages := json.RawMessage(`{"resolve":12,"pull":340,"warmup":30000}`)
	must(t, st.FinishJob(ctx, j.ID, c.Epoch, domain.JobFailed, "warmup: stalled", tail, stages, t0.Add(5*time.Second)))
	got, err = st.GetJob(ctx, j.ID)
	must(t, err)
	if got.State != domain.JobFailed || got.Error != "warmup: stalled" || got.OutputTail != tail || got.Digest != "sha256:aaa" {
		t.Fatalf("finished job = %+v", got)
	}
	wantJSON(t, "stages", got.Stages, stages)
	wantTime(t, "updated_at", got.UpdatedAt, t0.Add(5*time.Second))

	// A finished job takes no more writes, even under its own epoch.
	wantErr(t, st.UpdateJobProgress(ctx, progress(c, domain.JobCapturing, "x", 1, 1), t0), store.ErrConflict)
	wantErr(t, st.FinishJob(ctx, j.ID, c.Epoch, domain.JobReady, "", "", nil, t0), store.ErrConflict)
	_, err = st.ClaimJob(ctx, j.ID, time.Minute, t0.Add(time.Hour*24))
	wantErr(t, err, store.ErrConflict)
	unknown := domain.ImageJob{ID: newImageJobID(), Epoch: 1}
	wantErr(t, st.UpdateJobProgress(ctx, progress(unknown, domain.JobCapturing, "x", 1, 1), t0), store.ErrNotFound)
	wantErr(t, st.FinishJob(ctx, unknown.ID, 1, domain.JobReady, "", "", nil, t0), store.ErrNotFound)
	_, err = st.ClaimJob(ctx, unknown.ID, time.Minute, t0)
	wantErr(t, err, store.ErrNotFound)
	_, err = st.GetJob(ctx, unknown.ID)
	wantErr(t, err, store.ErrNotFound)
}

func testImageJobRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	_, err := newJob(t, st, newImageID(), t0)
	wantErr(t, err, store.ErrNotFound)
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	c := claimJob(t, st, j.ID, t0)
	must(t, st.FinishJob(ctx, j.ID, c.Epoch, domain.JobReady, "", "", nil, t0))
	_, err = st.CreateJob(ctx, domain.ImageJob{ID: j.ID, ImageID: img.ID, Kind: domain.ImageJobEnable, CreatedAt: t0})
	wantErr(t, err, store.ErrConflict)
	if _, err := st.CreateJob(ctx, domain.ImageJob{ID: newImageJobID(), ImageID: img.ID, Kind: "rebuild"}); err == nil {
		t.Fatal("CreateJob accepted an unknown kind")
	}
	k, err := newJob(t, st, img.ID, t0)
	must(t, err)
	// An unclaimed job takes no fenced writes: nobody holds it.
	wantErr(t, st.UpdateJobProgress(ctx, progress(k, domain.JobMaterializing, "", 0, 0), t0), store.ErrConflict)
	wantErr(t, st.FinishJob(ctx, k.ID, k.Epoch, domain.JobFailed, "", "", nil, t0), store.ErrConflict)
	if _, err := st.ClaimJob(ctx, k.ID, 0, t0); err == nil {
		t.Fatal("ClaimJob accepted a zero lease")
	}
	kc := claimJob(t, st, k.ID, t0)
	for _, state := range []domain.ImageJobState{domain.JobReady, domain.JobPending, "bogus"} {
		if err := st.UpdateJobProgress(ctx, progress(kc, state, "", 0, 0), t0); err == nil {
			t.Fatalf("UpdateJobProgress accepted state %q", state)
		}
	}
	bad := progress(kc, domain.JobCapturing, "", 0, 0)
	bad.Stages = json.RawMessage(`{"pull":`)
	if err := st.UpdateJobProgress(ctx, bad, t0); err == nil {
		t.Fatal("UpdateJobProgress accepted malformed stages")
	}
	if err := st.FinishJob(ctx, k.ID, kc.Epoch, domain.JobCapturing, "", "", nil, t0); err == nil {
		t.Fatal("FinishJob accepted an active state")
	}
	if err := st.FinishJob(ctx, k.ID, kc.Epoch, domain.JobReady, "", "", json.RawMessage(`[`), t0); err == nil {
		t.Fatal("FinishJob accepted malformed stages")
	}
	got, err := st.GetJob(ctx, k.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(kc) {
		t.Fatalf("job after rejected writes = %+v, want %+v", got, kc)
	}
}

// testImageOrgs: two organisations each have a live image of one name;
// reads by name and lists are of one organisation (the fleet's list, of
// every one); an image needs an organisation.
func testImageOrgs(t *testing.T, st store.Store) {
	ctx := t.Context()
	mine, theirs := newImage("debian"), newImage("debian")
	theirs.Org = "org-b"
	must(t, st.CreateImage(ctx, mine))
	must(t, st.CreateImage(ctx, theirs))
	again := newImage("debian")
	wantErr(t, st.CreateImage(ctx, again), store.ErrConflict)
	none := newImage("x")
	none.Org = ""
	if err := st.CreateImage(ctx, none); err == nil {
		t.Fatal("CreateImage took an image of no organisation")
	}
	for org, want := range map[domain.OrgID]domain.ImageID{domain.FirstOrg: mine.ID, "org-b": theirs.ID} {
		got, err := st.GetImageByName(ctx, org, "debian")
		must(t, err)
		list, err := st.ListImages(ctx, org)
		must(t, err)
		if got.ID != want || got.Org != org || len(list) != 1 || list[0].ID != want {
			t.Errorf("%s: by name %+v, list %d; want %s", org, got, len(list), want)
		}
	}
	_, err := st.GetImageByName(ctx, "org-c", "debian")
	wantErr(t, err, store.ErrNotFound)
	if all, err := st.ListImages(ctx, ""); err != nil || len(all) != 2 {
		t.Errorf("every organisation's images = %d, %v; want 2", len(all), err)
	}
}
