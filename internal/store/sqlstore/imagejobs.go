package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const jobCols = `id, image_id, kind, state, stage, bytes_done, bytes_total, attempts, error, output_tail,
	epoch, lease_until, stages, digest, created_at, updated_at, warnings`

// activeJobStates is the SQL list of domain.ImageJobState.Active states.
const activeJobStates = `('pending', 'materializing', 'capturing')`

func scanJob(r scanner) (domain.ImageJob, error) {
	var j domain.ImageJob
	var kind, state string
	var stages, warnings sql.NullString
	var lease, created, updated int64
	err := r.Scan(&j.ID, &j.ImageID, &kind, &state, &j.Stage, &j.BytesDone, &j.BytesTotal, &j.Attempts, &j.Error,
		&j.OutputTail, &j.Epoch, &lease, &stages, &j.Digest, &created, &updated, &warnings)
	if err != nil {
		return domain.ImageJob{}, err
	}
	if err := decodeTyped("warnings", warnings, &j.Warnings); err != nil {
		return domain.ImageJob{}, fmt.Errorf("image job %s: %w", j.ID, err)
	}
	j.Kind, j.State, j.Stages = domain.ImageJobKind(kind), domain.ImageJobState(state), fromJSON(stages)
	j.LeaseUntil, j.CreatedAt, j.UpdatedAt = fromMicros(lease), fromMicros(created), fromMicros(updated)
	return j, nil
}

// CreateJob implements store.Images. The partial unique index
// image_jobs_one_active is what keeps a second active job out.
func (s *Store) CreateJob(ctx context.Context, j domain.ImageJob) (domain.ImageJob, error) {
	if j.ID == "" || j.ImageID == "" {
		return domain.ImageJob{}, errors.New("create image job: job id and image id are required")
	}
	if j.Kind != domain.ImageJobEnable && j.Kind != domain.ImageJobRefresh {
		return domain.ImageJob{}, fmt.Errorf("create image job %s: unknown kind %q", j.ID, j.Kind)
	}
	if j.State != "" && j.State != domain.JobPending {
		return domain.ImageJob{}, fmt.Errorf("create image job %s: a new job is pending, not %s", j.ID, j.State)
	}
	at := orNow(j.CreatedAt)
	j = domain.ImageJob{ID: j.ID, ImageID: j.ImageID, Kind: j.Kind, State: domain.JobPending,
		CreatedAt: fromMicros(micros(at)), UpdatedAt: fromMicros(micros(at))}
	err := s.inTx(ctx, func(tx execer) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM images WHERE id = $1`, j.ImageID).Scan(&one)
		if isNoRows(err) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO image_jobs (id, image_id, kind, state, created_at, updated_at)
			VALUES ($1, $2, $3, 'pending', $4, $4)`, j.ID, j.ImageID, string(j.Kind), micros(at))
		return err
	})
	if s.isUnique(err) {
		// The transaction is gone (Postgres aborts it on the violation): tell
		// a reused id from an active job with a fresh read.
		if _, gerr := s.GetJob(ctx, j.ID); gerr == nil {
			return domain.ImageJob{}, fmt.Errorf("create image job %s: %w: id already used", j.ID, store.ErrConflict)
		}
		return domain.ImageJob{}, fmt.Errorf("create image job %s for %s: %w", j.ID, j.ImageID, store.ErrJobActive)
	}
	if err != nil {
		return domain.ImageJob{}, fmt.Errorf("create image job %s for %s: %w", j.ID, j.ImageID, err)
	}
	return j, nil
}

// GetJob implements store.Images.
func (s *Store) GetJob(ctx context.Context, id domain.ImageJobID) (domain.ImageJob, error) {
	j, err := scanJob(s.read.QueryRowContext(ctx, `SELECT `+jobCols+` FROM image_jobs WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.ImageJob{}, fmt.Errorf("get image job %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.ImageJob{}, fmt.Errorf("get image job %s: %w", id, err)
	}
	return j, nil
}

// ListJobs implements store.Images, ordered by created_at, then id.
func (s *Store) ListJobs(ctx context.Context, imageID domain.ImageID) ([]domain.ImageJob, error) {
	out, err := s.queryJobs(ctx, `SELECT `+jobCols+` FROM image_jobs
		WHERE image_id = $1 ORDER BY created_at, id`, imageID)
	if err != nil {
		return nil, fmt.Errorf("list jobs of image %s: %w", imageID, err)
	}
	return out, nil
}

func (s *Store) queryJobs(ctx context.Context, q string, args ...any) ([]domain.ImageJob, error) {
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []domain.ImageJob
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}
