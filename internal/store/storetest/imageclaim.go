package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

func testImageJobClaim(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	at := t0.Add(time.Second)
	c, err := st.ClaimJob(ctx, j.ID, time.Minute, at)
	must(t, err)
	if c.ID != j.ID || c.State != domain.JobMaterializing || c.Epoch != 1 || c.Attempts != 1 || c.Stage != "" ||
		c.ImageID != img.ID || c.Kind != domain.ImageJobEnable {
		t.Fatalf("claimed job = %+v", c)
	}
	wantTime(t, "lease_until", c.LeaseUntil, at.Add(time.Minute))
	wantTime(t, "updated_at", c.UpdatedAt, at)
	wantTime(t, "created_at", c.CreatedAt, t0)
	got, err := st.GetJob(ctx, j.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(c) {
		t.Fatalf("GetJob = %+v, ClaimJob returned %+v", got, c)
	}
	// A live lease is not claimable, up to and including its last instant.
	for _, when := range []time.Time{at, at.Add(time.Minute)} {
		_, err = st.ClaimJob(ctx, j.ID, time.Minute, when)
		wantErr(t, err, store.ErrConflict)
	}
	// Progress that extends the lease keeps the job held past the first lease.
	p := progress(c, domain.JobCapturing, "boot", 0, 0)
	p.LeaseUntil = at.Add(time.Hour)
	must(t, st.UpdateJobProgress(ctx, p, at))
	_, err = st.ClaimJob(ctx, j.ID, time.Minute, at.Add(2*time.Minute))
	wantErr(t, err, store.ErrConflict)
	got, err = st.GetJob(ctx, j.ID)
	must(t, err)
	if got.Epoch != 1 || got.Attempts != 1 || got.State != domain.JobCapturing {
		t.Fatalf("job after refused claims = %+v", got)
	}
}

func testImageJobReclaimFences(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	first := claimJob(t, st, j.ID, t0)
	p := progress(first, domain.JobCapturing, "warmup", 3, 9)
	p.Digest, p.Stages = "sha256:aaa", json.RawMessage(`{"pull":5}`)
	must(t, st.UpdateJobProgress(ctx, p, t0))

	// The first runner died: just after its lease, another claims the job.
	later := t0.Add(time.Minute + time.Microsecond)
	second, err := st.ClaimJob(ctx, j.ID, 2*time.Minute, later)
	must(t, err)
	if second.Epoch != first.Epoch+1 || second.Attempts != 2 || second.State != domain.JobMaterializing ||
		second.Stage != "" || second.BytesDone != 0 || second.BytesTotal != 0 {
		t.Fatalf("reclaimed job = %+v, first claim %+v", second, first)
	}
	if second.Digest != "sha256:aaa" {
		t.Fatalf("reclaim dropped the digest: %q", second.Digest)
	}
	wantJSON(t, "stages", second.Stages, p.Stages)
	wantTime(t, "lease_until", second.LeaseUntil, later.Add(2*time.Minute))

	// Every write of the first runner is stale now and changes nothing.
	stale := progress(first, domain.JobCapturing, "stale", 1, 1)
	stale.LeaseUntil, stale.Digest = later.Add(time.Hour), "sha256:bad"
	wantErr(t, st.UpdateJobProgress(ctx, stale, later), store.ErrStaleEpoch)
	wantErr(t, st.FinishJob(ctx, j.ID, first.Epoch, domain.JobFailed, "stale", "tail", nil, later), store.ErrStaleEpoch)
	wantErr(t, st.FinishJob(ctx, j.ID, first.Epoch, domain.JobReady, "", "", nil, later), store.ErrStaleEpoch)
	// A future epoch is no better.
	wantErr(t, st.FinishJob(ctx, j.ID, second.Epoch+1, domain.JobReady, "", "", nil, later), store.ErrStaleEpoch)
	got, err := st.GetJob(ctx, j.ID)
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(second) {
		t.Fatalf("job after stale writes = %+v, want %+v", got, second)
	}
	// The current runner still writes; once finished, even the stale one
	// is told about the epoch first.
	must(t, st.FinishJob(ctx, j.ID, second.Epoch, domain.JobReady, "", "", nil, later))
	wantErr(t, st.UpdateJobProgress(ctx, stale, later), store.ErrStaleEpoch)
	wantErr(t, st.UpdateJobProgress(ctx, progress(second, domain.JobCapturing, "", 0, 0), later), store.ErrConflict)
}

// ClaimJobConcurrently creates jobs pending jobs (one image each), then
// lets workers goroutines per store race ClaimJob on each one and checks
// that exactly one claim per job wins and the others get ErrConflict.
func ClaimJobConcurrently(t *testing.T, stores []store.Store, workers, jobs int) {
	t.Helper()
	for n := range jobs {
		img := createImage(t, stores[0], fmt.Sprintf("img-%d", n))
		j, err := newJob(t, stores[0], img.ID, t0)
		must(t, err)
		var won sync.Map
		var wg sync.WaitGroup
		errs := make(chan error, workers*len(stores))
		start := make(chan struct{})
		for i, st := range stores {
			for w := range workers {
				wg.Go(func() {
					<-start
					c, err := st.ClaimJob(t.Context(), j.ID, time.Hour, t0)
					switch {
					case err == nil:
						won.Store(fmt.Sprintf("s%d-w%d", i, w), c.Epoch)
					case !errors.Is(err, store.ErrConflict):
						errs <- err
					}
				})
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		var winners []string
		won.Range(func(k, v any) bool {
			winners = append(winners, fmt.Sprintf("%v (epoch %v)", k, v))
			return true
		})
		if len(winners) != 1 {
			t.Fatalf("job %d: %d claims won: %v; want exactly one", n, len(winners), winners)
		}
		got, err := stores[0].GetJob(t.Context(), j.ID)
		must(t, err)
		if got.Epoch != 1 || got.Attempts != 1 {
			t.Fatalf("job %d after the race: epoch %d, attempts %d; want 1, 1", n, got.Epoch, got.Attempts)
		}
	}
}

func testImageJobListClaimable(t *testing.T, st store.Store) {
	ctx := t.Context()
	job := func(name string, created time.Time) domain.ImageJob {
		img := createImage(t, st, name)
		j, err := newJob(t, st, img.ID, created)
		must(t, err)
		return j
	}
	// Created out of order: the list is oldest first whatever the inserts.
	late := job("late", t0.Add(4*time.Second))
	early := job("early", t0.Add(time.Second))
	live := job("live", t0)
	claimJob(t, st, live.ID, t0) // leased until t0+1m
	expired := job("expired", t0.Add(2*time.Second))
	c, err := st.ClaimJob(ctx, expired.ID, time.Second, t0) // leased until t0+1s
	must(t, err)
	must(t, st.UpdateJobProgress(ctx, progress(c, domain.JobCapturing, "", 0, 0), t0))
	done := job("done", t0.Add(3*time.Second))
	d := claimJob(t, st, done.ID, t0)
	must(t, st.FinishJob(ctx, done.ID, d.Epoch, domain.JobFailed, "x", "", nil, t0))

	ids := func(jobs []domain.ImageJob) []domain.ImageJobID {
		var out []domain.ImageJobID
		for _, j := range jobs {
			out = append(out, j.ID)
		}
		return out
	}
	cases := []struct {
		name  string
		at    time.Time
		limit int
		want  []domain.ImageJobID
	}{
		{"leases live", t0.Add(time.Second), 0, []domain.ImageJobID{early.ID, late.ID}},
		{"one lease ended", t0.Add(30 * time.Second), 0, []domain.ImageJobID{early.ID, expired.ID, late.ID}},
		{"limited", t0.Add(30 * time.Second), 2, []domain.ImageJobID{early.ID, expired.ID}},
		{"both ended", t0.Add(time.Hour), -1, []domain.ImageJobID{live.ID, early.ID, expired.ID, late.ID}},
	}
	for _, c := range cases {
		got, err := st.ListClaimableJobs(ctx, c.at, c.limit)
		must(t, err)
		if fmt.Sprint(ids(got)) != fmt.Sprint(c.want) {
			t.Fatalf("%s: claimable = %v, want %v", c.name, ids(got), c.want)
		}
	}
	// Every listed job is claimable at that time.
	list, err := st.ListClaimableJobs(ctx, t0.Add(time.Hour), 0)
	must(t, err)
	for _, j := range list {
		claimJob(t, st, j.ID, t0.Add(time.Hour))
	}
	list, err = st.ListClaimableJobs(ctx, t0.Add(time.Hour), 0)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("claimable after claiming all = %v", ids(list))
	}
}

// captured is img as a finished enable leaves it.
func captured(img domain.Image) domain.Image {
	img.Digest, img.BaseID = "sha256:ccc", "snap-base-9"
	img.Manifests = json.RawMessage(`{"memory":{"chunks":["m1"]},"disk":{"chunks":["d1"]}}`)
	img.Facts = domain.HostFacts{Kernel: "6.1"}
	img.Config = json.RawMessage(`{"memory":4096}`)
	return img
}

func testCompleteImageJob(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	c := claimJob(t, st, j.ID, t0)
	must(t, st.UpdateJobProgress(ctx, progress(c, domain.JobCapturing, "snapshot", 1, 1), t0))
	want := captured(img)
	want.State = domain.ImageReady
	at := t0.Add(time.Minute)
	want.UpdatedAt = at
	stages := json.RawMessage(`{"pull":100,"capture":2000}`)
	// Only what the job made is written: a name, ref or state in the
	// argument does not overwrite the row's.
	arg := want
	arg.Name, arg.Ref, arg.State = "other-name", "other/ref:1", domain.ImageDisabled
	must(t, st.CompleteImageJob(ctx, j.ID, c.Epoch, arg, stages, at))
	got, err := st.GetImage(ctx, img.ID)
	must(t, err)
	wantImage(t, got, want)
	gj, err := st.GetJob(ctx, j.ID)
	must(t, err)
	if gj.State != domain.JobReady || gj.Epoch != c.Epoch {
		t.Fatalf("completed job = %+v", gj)
	}
	wantJSON(t, "stages", gj.Stages, stages)
	wantTime(t, "job updated_at", gj.UpdatedAt, at)
	// Completing twice is refused: the job is no longer claimed.
	wantErr(t, st.CompleteImageJob(ctx, j.ID, c.Epoch, want, nil, at), store.ErrConflict)
}

// testCompleteImageJobWritesNothing checks that a refused CompleteImageJob
// leaves both the job and the image as they were.
func testCompleteImageJobWritesNothing(t *testing.T, st store.Store) {
	ctx := t.Context()
	other := createImage(t, st, "alpine")
	otherJob, err := newJob(t, st, other.ID, t0)
	must(t, err)
	oc := claimJob(t, st, otherJob.ID, t0)
	otherBefore, err := st.GetImage(ctx, other.ID)
	must(t, err)
	malformed := func(img domain.Image) domain.Image { img.Manifests = json.RawMessage(`{`); return img }
	cases := []struct {
		name string
		// setup returns the job to complete and the epoch to complete it with.
		setup  func(t *testing.T, img domain.Image, c domain.ImageJob) (jobID domain.ImageJobID, epoch int64)
		change func(img domain.Image) domain.Image
		want   error // nil: any error
	}{
		{"stale epoch", func(t *testing.T, _ domain.Image, c domain.ImageJob) (domain.ImageJobID, int64) {
			claimJob(t, st, c.ID, t0.Add(time.Hour)) // the lease ended; someone else has it
			return c.ID, c.Epoch
		}, captured, store.ErrStaleEpoch},
		{"job of another image", func(*testing.T, domain.Image, domain.ImageJob) (domain.ImageJobID, int64) {
			return otherJob.ID, oc.Epoch
		}, captured, store.ErrConflict},
		{"unknown job", func(*testing.T, domain.Image, domain.ImageJob) (domain.ImageJobID, int64) {
			return newImageJobID(), 1
		}, captured, store.ErrNotFound},
		{"job finished", func(t *testing.T, _ domain.Image, c domain.ImageJob) (domain.ImageJobID, int64) {
			must(t, st.FinishJob(ctx, c.ID, c.Epoch, domain.JobFailed, "x", "", nil, t0))
			return c.ID, c.Epoch
		}, captured, store.ErrConflict},
		{"image disabled meanwhile", func(t *testing.T, img domain.Image, c domain.ImageJob) (domain.ImageJobID, int64) {
			must(t, st.SetImageState(ctx, img.ID, domain.ImageDisabled, t0))
			return c.ID, c.Epoch
		}, captured, store.ErrConflict},
		{"malformed image", func(*testing.T, domain.Image, domain.ImageJob) (domain.ImageJobID, int64) { return "", 0 },
			func(img domain.Image) domain.Image { return malformed(captured(img)) }, nil},
	}
	for i, tc := range cases {
		img := createImage(t, st, fmt.Sprintf("img-%d", i))
		j, err := newJob(t, st, img.ID, t0)
		must(t, err)
		c := claimJob(t, st, j.ID, t0)
		jobID, epoch := tc.setup(t, img, c)
		if jobID == "" {
			jobID, epoch = c.ID, c.Epoch
		}
		beforeImg, err := st.GetImage(ctx, img.ID)
		must(t, err)
		beforeJobs := snapshotJobs(t, st, img.ID, other.ID)
		err = st.CompleteImageJob(ctx, jobID, epoch, tc.change(img), json.RawMessage(`{"pull":1}`), t0.Add(2*time.Hour))
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Fatalf("%s: CompleteImageJob error = %v, want %v", tc.name, err, tc.want)
		}
		afterImg, err := st.GetImage(ctx, img.ID)
		must(t, err)
		wantImage(t, afterImg, beforeImg)
		if after := snapshotJobs(t, st, img.ID, other.ID); after != beforeJobs {
			t.Fatalf("%s: jobs changed by a refused CompleteImageJob:\n%s\nwant\n%s", tc.name, after, beforeJobs)
		}
	}
	afterOther, err := st.GetImage(ctx, other.ID)
	must(t, err)
	wantImage(t, afterOther, otherBefore)
}

// snapshotJobs prints every job of the images, for before/after checks.
func snapshotJobs(t *testing.T, st store.Store, imageIDs ...domain.ImageID) string {
	t.Helper()
	var out string
	for _, id := range imageIDs {
		jobs, err := st.ListJobs(t.Context(), id)
		must(t, err)
		out += fmt.Sprintln(jobs)
	}
	return out
}

// testImageJobWarnings: progress writes record a job's warnings exactly (nil
// keeps them, empty clears them), a reclaim keeps them, a stale write changes
// none, and every read (GetJob, ListJobs) shows them.
func testImageJobWarnings(t *testing.T, st store.Store) {
	ctx := t.Context()
	img := createImage(t, st, "debian")
	j, err := newJob(t, st, img.ID, t0)
	must(t, err)
	first := claimJob(t, st, j.ID, t0)
	if first.Warnings != nil {
		t.Fatalf("a new job has warnings %q", first.Warnings)
	}
	warnings := []string{"left out 7 device nodes and 1 FIFO: /dev/console, /dev/null, …; the guest's /dev is devtmpfs",
		`a "quoted" one, with a tab	and é`}
	wantWarnings := func(what string, want []string) {
		t.Helper()
		got, err := st.GetJob(ctx, j.ID)
		must(t, err)
		jobs, err := st.ListJobs(ctx, img.ID)
		must(t, err)
		if fmt.Sprintf("%q", got.Warnings) != fmt.Sprintf("%q", want) || len(jobs) != 1 ||
			fmt.Sprintf("%q", jobs[0].Warnings) != fmt.Sprintf("%q", want) {
			t.Fatalf("%s: warnings %q (listed %q), want %q", what, got.Warnings, jobs[0].Warnings, want)
		}
	}
	p := progress(first, domain.JobMaterializing, "pull", 1, 2)
	p.Warnings = warnings
	must(t, st.UpdateJobProgress(ctx, p, t0))
	wantWarnings("recorded", warnings)
	must(t, st.UpdateJobProgress(ctx, progress(first, domain.JobCapturing, "boot", 0, 0), t0))
	wantWarnings("a progress write without warnings", warnings)

	second, err := st.ClaimJob(ctx, j.ID, time.Minute, t0.Add(time.Minute+time.Microsecond))
	must(t, err)
	wantWarnings("reclaimed", warnings)
	stale := progress(first, domain.JobCapturing, "stale", 0, 0)
	stale.Warnings = []string{"stale"}
	wantErr(t, st.UpdateJobProgress(ctx, stale, t0), store.ErrStaleEpoch)
	wantWarnings("after a stale write", warnings)

	clearing := progress(second, domain.JobCapturing, "boot", 0, 0)
	clearing.Warnings = []string{}
	must(t, st.UpdateJobProgress(ctx, clearing, t0))
	wantWarnings("cleared", nil)
	p = progress(second, domain.JobCapturing, "boot", 0, 0)
	p.Warnings = warnings[:1]
	must(t, st.UpdateJobProgress(ctx, p, t0))
	must(t, st.FinishJob(ctx, j.ID, second.Epoch, domain.JobFailed, "boom", "", nil, t0))
	wantWarnings("finished", warnings[:1])
}
