package imagejobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Image job runners.
const (
	imageJobLease    = 60 * time.Second // a claimed job is reclaimable after this without renewal
	imageJobRunners  = 2                // jobs run at once per replica
	imageJobPoll     = 2 * time.Second  // besides wake-ups
	progressInterval = 500 * time.Millisecond
)

// imageJobLoop claims and runs image jobs until ctx ends, then waits for
// the running ones.
func (c *Images) jobLoop(ctx context.Context) {
	wake := c.st.Subscribe(ctx, topicImageJobs)
	sem := make(chan struct{}, imageJobRunners)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(imageJobPoll)
	defer t.Stop()
	for {
		if free := imageJobRunners - len(sem); free > 0 {
			jobs, err := c.st.ListClaimableJobs(ctx, c.now(), free)
			if err != nil && ctx.Err() == nil {
				c.log.Warn("list image jobs", "err", err)
			}
			for _, j := range jobs {
				// ClaimJob writes the state Transition gives a claim (materializing).
				if _, err := Transition(j.State, JobClaim); err != nil {
					c.log.Warn("claim image job", "job_id", j.ID, "err", err)
					continue
				}
				claimed, err := c.st.ClaimJob(ctx, j.ID, imageJobLease, c.now())
				if err != nil {
					continue // another replica won, or it finished meanwhile
				}
				sem <- struct{}{}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					c.runImageJob(ctx, claimed)
				}()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-t.C:
		}
	}
}

// jobRun is one claimed job: its progress, flushed to the store (which
// also renews the lease) by keep; a stale epoch cancels the run.
type jobRun struct {
	c      *Images
	job    domain.ImageJob
	cancel context.CancelFunc

	mu       sync.Mutex
	state    domain.ImageJobState
	stage    string
	done     int64
	total    int64
	digest   string
	warnings []string         // nil until the materializer gave some
	started  time.Time        // of the current stage
	stages   map[string]int64 // finished stage -> ms
	dirty    bool
	lastSave time.Time
}

// progress records where the job is within its state; a new stage closes
// the previous one.
func (r *jobRun) progress(stage string, done, total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(r.state, stage, done, total)
}

// move applies ev to the job's state (Transition) and starts stage in the
// state it leads to; the next save writes it. A refused event changes
// nothing.
func (r *jobRun) move(ev JobEvent, stage string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	to, err := Transition(r.state, ev)
	if err != nil {
		return fmt.Errorf("move image job %s: %w", r.job.ID, err)
	}
	r.setLocked(to, stage, 0, 0)
	return nil
}

// next is the state ev moves the job to, for the store write that ends it.
func (r *jobRun) next(ev JobEvent) (domain.ImageJobState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	to, err := Transition(r.state, ev)
	if err != nil {
		return to, fmt.Errorf("end image job %s: %w", r.job.ID, err)
	}
	return to, nil
}

func (r *jobRun) setLocked(state domain.ImageJobState, stage string, done, total int64) {
	now := r.c.now()
	if stage != r.stage || state != r.state {
		r.closeStageLocked(now)
		r.started = now
	}
	r.state, r.stage, r.done, r.total, r.dirty = state, stage, done, total, true
}

func (r *jobRun) closeStageLocked(now time.Time) {
	if r.stage != "" && !r.started.IsZero() {
		r.stages[r.stage] += now.Sub(r.started).Milliseconds()
	}
}

// warn records what the job's users should know (the next save writes it).
func (r *jobRun) warn(warnings []string) {
	if len(warnings) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.warnings, r.dirty = warnings, true
}

// addStages records the stage times the capture host measured. They are
// parts of the host call, which is the stage open here (StageOnHost): it
// keeps only the time they leave (the link, the host's queue), so the
// stages are disjoint and add up to the job's wall time.
func (r *jobRun) addStages(ms map[string]int64) {
	now := r.c.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts int64
	for k, v := range ms {
		r.stages[k] += v
		parts += v
	}
	if r.stage == "" || r.started.IsZero() {
		return
	}
	r.stages[r.stage] += max(now.Sub(r.started).Milliseconds()-parts, 0)
	r.started = now
}

func (r *jobRun) stagesJSON() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(r.stages)
	return b
}

// save writes the progress when it changed, and at least every lease/3
// (renewing the lease). A stale epoch or a finished job ends the run.
func (r *jobRun) save(ctx context.Context, force bool) {
	r.mu.Lock()
	now := r.c.now()
	if !force && !r.dirty && now.Sub(r.lastSave) < imageJobLease/3 {
		r.mu.Unlock()
		return
	}
	p := store.JobProgress{ID: r.job.ID, Epoch: r.job.Epoch, State: r.state, Stage: r.stage, Done: r.done, Total: r.total,
		LeaseUntil: now.Add(imageJobLease), Digest: r.digest, Warnings: r.warnings}
	r.dirty, r.lastSave = false, now
	r.mu.Unlock()
	err := r.c.st.UpdateJobProgress(ctx, p, now)
	if errors.Is(err, store.ErrStaleEpoch) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		r.c.log.Warn("image job taken over or gone; stopping", "job_id", r.job.ID, "err", err)
		r.cancel()
	} else if err != nil && ctx.Err() == nil {
		r.c.log.Warn("save image job progress", "job_id", r.job.ID, "err", err)
	}
}

// keep saves progress until ctx ends.
func (r *jobRun) keep(ctx context.Context) {
	t := time.NewTicker(progressInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.save(ctx, false)
		}
	}
}

// jobFailure is a job's final failure: its message and warm-up tail.
type jobFailure struct {
	err  error
	tail string
}

func (f *jobFailure) Error() string { return f.err.Error() }
func (f *jobFailure) Unwrap() error { return f.err }

// runImageJob runs a claimed job to ready or failed.
func (c *Images) runImageJob(parent context.Context, job domain.ImageJob) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	r := &jobRun{c: c, job: job, cancel: cancel, state: job.State, stages: map[string]int64{}, lastSave: c.now()}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.keep(ctx)
	}()
	t0 := c.now()
	var img domain.Image
	var err error
	if job.Attempts > maxJobAttempts {
		err = &jobFailure{err: fmt.Errorf("gave up after %d attempts (each ended without an answer: a replica or the database failed mid-job)", maxJobAttempts)}
	} else {
		img, err = c.imageJob(ctx, r)
	}
	cancel()
	wg.Wait()
	if parent.Err() != nil {
		return // shutting down: the lease lapses and another runner resumes the job
	}
	r.mu.Lock()
	r.closeStageLocked(c.now())
	r.stage = ""
	r.mu.Unlock()
	fin := context.WithoutCancel(parent)
	r.save(fin, true) // the digest and last stage, before the job leaves its active states
	c.endImageJob(fin, r, img, err, t0)
}

// endImageJob records how a run that made img (err nil) or failed with err
// ended: the job ready with what it made on its image, failed when the
// failure is its own (final; a refused success is one), or left for
// another runner to try again. Each end is the state Transition gives; a
// refused failure writes nothing.
func (c *Images) endImageJob(ctx context.Context, r *jobRun, img domain.Image, err error, t0 time.Time) {
	job := r.job
	log := c.log.With("job_id", job.ID, "image_id", job.ImageID, "kind", string(job.Kind), "attempt", job.Attempts)
	if err == nil {
		// CompleteImageJob writes the state Transition gives (ready).
		if _, terr := r.next(JobSucceed); terr != nil {
			err = &jobFailure{err: terr}
		} else {
			err = c.st.CompleteImageJob(ctx, job.ID, job.Epoch, img, r.stagesJSON(), c.now())
		}
		if err == nil {
			log.Info("image ready", "name", img.Name, "digest", img.Digest, "base_snapshot_id", img.BaseID,
				"ms", c.now().Sub(t0).Milliseconds(), "stages_ms", r.stages)
			c.notifyImage(ctx, img.ID)
			return
		}
		if errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrStaleEpoch) {
			err = &jobFailure{err: err} // disabled meanwhile: final
		}
	}
	var jf *jobFailure
	if !errors.As(err, &jf) {
		// Not the job's own failure (lost claim, shutdown, the database):
		// the lease lapses and another runner tries again.
		log.Warn("image job stopped without an answer; it will be tried again", "err", err)
		return
	}
	msg, tail := cleanText(err.Error()), cleanText(jf.tail)
	to, ferr := r.next(JobFail)
	if ferr == nil {
		ferr = c.st.FinishJob(ctx, job.ID, job.Epoch, to, msg, tail, r.stagesJSON(), c.now())
	}
	if ferr != nil {
		log.Error("record image job failure", "err", ferr, "failure", err)
		return
	}
	log.Warn("image job failed", "err", err)
	c.notifyImage(ctx, job.ImageID)
}

// maxJobAttempts bounds how often a job is claimed again after its runner
// stopped without an answer.
const maxJobAttempts = 5

// cleanText makes s storable as text: valid UTF-8 without NUL bytes (a
// warm-up may print anything).
func cleanText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// notifyImage wakes waiters on the image's topic.
func (c *Images) notifyImage(ctx context.Context, imageID domain.ImageID) {
	if err := c.st.Notify(ctx, "image:"+string(imageID)); err != nil {
		c.log.Warn("notify image", "image_id", imageID, "err", err)
	}
}
