package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

const imageCols = `id, org_id, name, ref, digest, state, config, credential_id, manifests, facts, base_id, created_at,
	updated_at`

func scanImage(r scanner) (domain.Image, error) {
	var img domain.Image
	var state string
	var config, cred, manifests, facts sql.NullString
	var created, updated int64
	err := r.Scan(&img.ID, &img.Org, &img.Name, &img.Ref, &img.Digest, &state, &config, &cred, &manifests, &facts,
		&img.BaseID, &created, &updated)
	if err != nil {
		return domain.Image{}, err
	}
	img.State, img.CredentialID = domain.ImageState(state), cred.String
	img.Config, img.Manifests = fromJSON(config), fromJSON(manifests)
	if err := decodeTyped("facts", facts, &img.Facts); err != nil {
		return domain.Image{}, fmt.Errorf("image %s: %w", img.ID, err)
	}
	img.CreatedAt, img.UpdatedAt = fromMicros(created), fromMicros(updated)
	return img, nil
}

// checkImage validates what CreateImage and UpdateImage write.
func checkImage(img domain.Image) error {
	if img.ID == "" || img.Org == "" || img.Name == "" || img.Ref == "" {
		return errors.New("image id, organisation, name and ref are required")
	}
	if img.State != domain.ImageReady && img.State != domain.ImageDisabled {
		return fmt.Errorf("unknown image state %q", img.State)
	}
	_, err := imageFacts(img)
	return err
}

// checkImageJSON validates the JSON columns of img.
// imageFacts checks the JSON columns of img and encodes its facts column.
func imageFacts(img domain.Image) (any, error) {
	for field, raw := range map[string][]byte{"config": img.Config, "manifests": img.Manifests} {
		if err := checkJSON(field, raw); err != nil {
			return nil, err
		}
	}
	return typedArg("facts", img.Facts)
}

// nullString is NULL for "".
func nullString(v string) any {
	if v == "" {
		return nil
	}
	return v
}

// CreateImage implements store.Images.
func (s *Store) CreateImage(ctx context.Context, img domain.Image) error {
	if img.State == "" {
		img.State = domain.ImageReady
	}
	if err := checkImage(img); err != nil {
		return fmt.Errorf("create image %s: %w", img.Name, err)
	}
	facts, err := imageFacts(img)
	if err != nil {
		return fmt.Errorf("create image %s: %w", img.Name, err)
	}
	at := micros(orNow(img.CreatedAt))
	_, err = s.write.ExecContext(ctx, `INSERT INTO images (`+imageCols+`)
		VALUES ($1, $12, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`,
		img.ID, img.Name, img.Ref, img.Digest, string(img.State), jsonArg(img.Config), nullString(img.CredentialID),
		jsonArg(img.Manifests), facts, img.BaseID, at, string(img.Org))
	if s.isUnique(err) {
		return fmt.Errorf("create image %s: %w: id or name already used", img.Name, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("create image %s: %w", img.Name, err)
	}
	return nil
}

// GetImage implements store.Images.
func (s *Store) GetImage(ctx context.Context, id domain.ImageID) (domain.Image, error) {
	img, err := scanImage(s.read.QueryRowContext(ctx, `SELECT `+imageCols+` FROM images WHERE id = $1`, id))
	if isNoRows(err) {
		return domain.Image{}, fmt.Errorf("get image %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return domain.Image{}, fmt.Errorf("get image %s: %w", id, err)
	}
	return img, nil
}

// GetImageByName implements store.Images.
func (s *Store) GetImageByName(ctx context.Context, org domain.OrgID, name string) (domain.Image, error) {
	img, err := scanImage(s.read.QueryRowContext(ctx, `SELECT `+imageCols+` FROM images
		WHERE org_id = $1 AND name = $2 AND state <> 'disabled'`, string(org), name))
	if isNoRows(err) {
		return domain.Image{}, fmt.Errorf("get image named %s: %w", name, store.ErrNotFound)
	}
	if err != nil {
		return domain.Image{}, fmt.Errorf("get image named %s: %w", name, err)
	}
	return img, nil
}

// ListImages implements store.Images.
func (s *Store) ListImages(ctx context.Context, org domain.OrgID) ([]domain.Image, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+imageCols+` FROM images
		WHERE CAST($1 AS TEXT) = '' OR org_id = $1 ORDER BY name, id`, string(org))
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	defer rows.Close()
	var out []domain.Image
	for rows.Next() {
		img, err := scanImage(rows)
		if err != nil {
			return nil, fmt.Errorf("list images: %w", err)
		}
		out = append(out, img)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	return out, nil
}

// UpdateImage implements store.Images.
func (s *Store) UpdateImage(ctx context.Context, img domain.Image, at time.Time) error {
	if err := checkImage(img); err != nil {
		return fmt.Errorf("update image %s: %w", img.ID, err)
	}
	res, err := updateImage(ctx, s.write, img, at)
	return s.imageWritten(res, err, "update image "+string(img.ID))
}

// updateImage rewrites every column of img's row but id and created_at;
// img must have passed checkImage.
func updateImage(ctx context.Context, db execer, img domain.Image, at time.Time) (sql.Result, error) {
	facts, err := imageFacts(img)
	if err != nil {
		return nil, err
	}
	return db.ExecContext(ctx, `UPDATE images SET name = $2, ref = $3, digest = $4, state = $5, config = $6,
		credential_id = $7, manifests = $8, facts = $9, base_id = $10, updated_at = $11 WHERE id = $1`,
		img.ID, img.Name, img.Ref, img.Digest, string(img.State), jsonArg(img.Config), nullString(img.CredentialID),
		jsonArg(img.Manifests), facts, img.BaseID, micros(orNow(at)))
}

// SetImageState implements store.Images.
func (s *Store) SetImageState(ctx context.Context, id domain.ImageID, state domain.ImageState, at time.Time) error {
	if state != domain.ImageReady && state != domain.ImageDisabled {
		return fmt.Errorf("set image %s state: unknown image state %q", id, state)
	}
	res, err := s.write.ExecContext(ctx, `UPDATE images SET state = $2, updated_at = $3 WHERE id = $1`,
		id, string(state), micros(orNow(at)))
	return s.imageWritten(res, err, fmt.Sprintf("set image %s state %s", id, state))
}

// imageWritten maps the outcome of an UPDATE of one image row.
func (s *Store) imageWritten(res sql.Result, err error, action string) error {
	if s.isUnique(err) {
		return fmt.Errorf("%s: %w: another image has the name", action, store.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", action, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("%s: %w", action, err)
	} else if n != 1 {
		return fmt.Errorf("%s: %w", action, store.ErrNotFound)
	}
	return nil
}
