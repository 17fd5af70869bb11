package profiles

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/store"
)

// Images shows an enabled image as a receipt needs it (imagejobs.Images
// does).
type Images interface {
	View(ctx context.Context, img domain.Image) (imagejobs.ImageView, error)
}

// Store is what the profile service reads and writes of the store: the
// profiles, and what their receipts and grants name.
type Store interface {
	store.Profiles
	GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error)
	GetImageByName(ctx context.Context, org domain.OrgID, name string) (domain.Image, error)
	FindHarness(ctx context.Context, name, version string) (domain.Harness, error)
	GetMember(ctx context.Context, org domain.OrgID, user domain.UserID) (domain.Member, error)
}

// Deps are what profiles need.
type Deps struct {
	Store  Store
	Images Images
	Logger *slog.Logger
	Now    func() time.Time // default time.Now
	NewID  func() string    // default UUIDv7
}

// Profiles keeps admin-curated session settings and resolves each into the
// grant receipt of what a task launched from it gets.
type Profiles struct {
	st     Store
	images Images
	log    *slog.Logger
	now    func() time.Time
	newID  func() string
}

// New returns the profile service.
func New(deps Deps) (*Profiles, error) {
	if deps.Store == nil || deps.Images == nil {
		return nil, errors.New("new profiles: Store and Images are required")
	}
	p := &Profiles{st: deps.Store, images: deps.Images, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.newID == nil {
		p.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return p, nil
}
