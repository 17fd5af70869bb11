package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// claimedJobStates is the SQL list of the states of a claimed job: the
// active states but pending. A claim never returns a job to pending.
const claimedJobStates = `('materializing', 'capturing')`

// ClaimJob implements store.Images. The WHERE clause is the whole claim
// test, so of concurrent claimers only one UPDATE matches the row: Postgres
// re-checks it against the winner's row version, SQLite has one writer.
func (s *Store) ClaimJob(ctx context.Context, id domain.ImageJobID, lease time.Duration, at time.Time) (domain.ImageJob, error) {
	action := "claim image job " + id
	if lease <= 0 {
		return domain.ImageJob{}, fmt.Errorf("%s: lease %v is not positive", action, lease)
	}
	now := orNow(at)
	j, err := scanJob(s.write.QueryRowContext(ctx, `UPDATE image_jobs SET epoch = epoch + 1, lease_until = $2,
		state = 'materializing', attempts = attempts + 1, stage = '', bytes_done = 0, bytes_total = 0, updated_at = $3
		WHERE id = $1 AND (state = 'pending' OR (state IN `+claimedJobStates+` AND lease_until < $3))
		RETURNING `+jobCols, id, micros(now.Add(lease)), micros(now)))
	if err == nil {
		return j, nil
	}
	if !isNoRows(err) {
		return domain.ImageJob{}, fmt.Errorf("%s: %w", action, err)
	}
	cur, err := s.GetJob(ctx, id)
	if err != nil {
		return domain.ImageJob{}, fmt.Errorf("%s: %w", action, err)
	}
	if cur.State.Active() {
		return domain.ImageJob{}, fmt.Errorf("%s: %w: %s under epoch %d, leased until %s", action, store.ErrConflict,
			cur.State, cur.Epoch, cur.LeaseUntil.Format(time.RFC3339Nano))
	}
	return domain.ImageJob{}, fmt.Errorf("%s: %w: job is %s", action, store.ErrConflict, cur.State)
}

// ListClaimableJobs implements store.Images, ordered by created_at, then id.
func (s *Store) ListClaimableJobs(ctx context.Context, at time.Time, limit int) ([]domain.ImageJob, error) {
	q := `SELECT ` + jobCols + ` FROM image_jobs WHERE state IN ` + activeJobStates + `
		AND (state = 'pending' OR lease_until < $1) ORDER BY created_at, id`
	args := []any{micros(orNow(at))}
	if limit > 0 {
		q, args = q+` LIMIT $2`, append(args, limit)
	}
	out, err := s.queryJobs(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list claimable image jobs: %w", err)
	}
	return out, nil
}

// UpdateJobProgress implements store.Images.
func (s *Store) UpdateJobProgress(ctx context.Context, p store.JobProgress, at time.Time) error {
	action := fmt.Sprintf("update image job %s progress", p.ID)
	if p.State != domain.JobMaterializing && p.State != domain.JobCapturing {
		return fmt.Errorf("%s: a claimed job is materializing or capturing, not %q", action, p.State)
	}
	if err := checkJSON("stages", p.Stages); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	u := jobUpdate{set: "state = $3, stage = $4, bytes_done = $5, bytes_total = $6, updated_at = $7",
		args: []any{p.ID, p.Epoch, string(p.State), p.Stage, p.Done, p.Total, micros(orNow(at))}}
	if !p.LeaseUntil.IsZero() {
		u.add("lease_until", micros(p.LeaseUntil))
	}
	if p.Digest != "" {
		u.add("digest", p.Digest)
	}
	if p.Warnings != nil {
		w, err := typedArg("warnings", p.Warnings) // an empty list is NULL, as a zero value is
		if len(p.Warnings) == 0 {
			w, err = nil, nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", action, err)
		}
		u.add("warnings", w)
	}
	u.addStages(p.Stages)
	if err := s.fencedJobWrite(ctx, s.write, u, ""); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// FinishJob implements store.Images.
func (s *Store) FinishJob(ctx context.Context, id domain.ImageJobID, epoch int64, state domain.ImageJobState, errMsg, tail string,
	stages json.RawMessage, at time.Time,
) error {
	action := fmt.Sprintf("finish image job %s %s", id, state)
	if state != domain.JobReady && state != domain.JobFailed {
		return fmt.Errorf("%s: a job finishes ready or failed", action)
	}
	if err := checkJSON("stages", stages); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	u := jobUpdate{set: "state = $3, error = $4, output_tail = $5, updated_at = $6",
		args: []any{id, epoch, string(state), errMsg, tail, micros(orNow(at))}}
	u.addStages(stages)
	if err := s.fencedJobWrite(ctx, s.write, u, ""); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// CompleteImageJob implements store.Images: the job's fenced finish and the
// image's rewrite commit together or not at all.
func (s *Store) CompleteImageJob(ctx context.Context, jobID domain.ImageJobID, epoch int64, img domain.Image,
	stages json.RawMessage, at time.Time,
) error {
	action := fmt.Sprintf("complete image job %s of image %s", jobID, img.ID)
	facts, err := imageFacts(img)
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if err := checkJSON("stages", stages); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	at = orNow(at)
	u := jobUpdate{set: "state = 'ready', updated_at = $3", args: []any{jobID, epoch, micros(at)}}
	u.addStages(stages)
	err = s.inTx(ctx, func(tx execer) error {
		if err := s.fencedJobWrite(ctx, tx, u, img.ID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `UPDATE images SET digest = $2, config = $3, manifests = $4, facts = $5,
			base_id = $6, updated_at = $7 WHERE id = $1 AND state <> 'disabled'`,
			img.ID, img.Digest, jsonArg(img.Config), jsonArg(img.Manifests), facts, img.BaseID, micros(at))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		var state string
		err = tx.QueryRowContext(ctx, `SELECT state FROM images WHERE id = $1`, img.ID).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("image: %w", store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("image was disabled while its job ran: %w", store.ErrConflict)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	return nil
}

// jobUpdate is the SET clause of a fenced job write; args[0] is the job id
// and args[1] the epoch, the rest what set names ($3...).
type jobUpdate struct {
	set  string
	args []any
}

func (u *jobUpdate) add(col string, v any) {
	u.args = append(u.args, v)
	u.set += fmt.Sprintf(", %s = $%d", col, len(u.args))
}

// addStages records stages unless nil (keep).
func (u *jobUpdate) addStages(stages json.RawMessage) {
	if len(stages) > 0 {
		u.add("stages", jsonArg(stages))
	}
}

// fencedJobWrite applies u to the job while it is claimed under the epoch
// (and, unless imageID is "", belongs to that image). On no match it reads
// the row back through db to say why: ErrNotFound, ErrConflict (other image,
// or not claimed) or ErrStaleEpoch.
func (s *Store) fencedJobWrite(ctx context.Context, db execer, u jobUpdate, imageID domain.ImageID) error {
	q, args := `UPDATE image_jobs SET `+u.set+` WHERE id = $1 AND epoch = $2 AND state IN `+claimedJobStates, u.args
	if imageID != "" {
		args = append(args[:len(args):len(args)], imageID)
		q += fmt.Sprintf(` AND image_id = $%d`, len(args))
	}
	res, err := db.ExecContext(ctx, q, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	var cur int64
	var state string
	var owner domain.ImageID
	err = db.QueryRowContext(ctx, `SELECT epoch, state, image_id FROM image_jobs WHERE id = $1`, u.args[0]).
		Scan(&cur, &state, &owner)
	epoch := u.args[1].(int64)
	switch {
	case isNoRows(err):
		return store.ErrNotFound
	case err != nil:
		return err
	case imageID != "" && owner != imageID:
		return fmt.Errorf("%w: job belongs to image %s", store.ErrConflict, owner)
	case cur != epoch:
		return fmt.Errorf("%w: epoch is %d, not %d", store.ErrStaleEpoch, cur, epoch)
	}
	// Pending, ready or failed; claimed only if it changed since the write.
	return fmt.Errorf("%w: job is %s", store.ErrConflict, state)
}
