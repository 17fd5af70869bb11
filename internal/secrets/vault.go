package secrets

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Sealer seals secrets at rest (secret.Sealer does); associated data binds
// a ciphertext to its row.
type Sealer interface {
	Seal(plaintext, associated []byte) ([]byte, error)
	Open(ciphertext, associated []byte) ([]byte, error)
}

// Store is what the vault reads and writes of the store: the secrets, and
// the profiles that name them.
type Store interface {
	store.Secrets
	ListProfiles(ctx context.Context, org domain.OrgID) ([]domain.Profile, error)
}

// Deps are what the vault needs.
type Deps struct {
	Store Store
	// Sealer seals values; nil: storing and opening secrets is refused.
	Sealer Sealer
	Logger *slog.Logger
	Now    func() time.Time // default time.Now
	NewID  func() string    // default UUIDv7
}

// Vault keeps users' secrets sealed: create, list (never a value), delete,
// and open for the parts that use them outside the guest.
type Vault struct {
	st      Store
	secrets Sealer
	log     *slog.Logger
	now     func() time.Time
	newID   func() string
}

// New returns a vault.
func New(deps Deps) (*Vault, error) {
	if deps.Store == nil {
		return nil, errors.New("new secrets vault: Store is required")
	}
	v := &Vault{st: deps.Store, secrets: deps.Sealer, log: deps.Logger, now: deps.Now, newID: deps.NewID}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	if v.now == nil {
		v.now = time.Now
	}
	if v.newID == nil {
		v.newID = func() string { return uuid.Must(uuid.NewV7()).String() }
	}
	return v, nil
}
