package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Internal names one of engrams's own sealed values (the model gateway's
// key, the credential broker's CA): one per deployment, in the secrets
// table, so every replica and every restart read the same one.
type Internal struct {
	Kind, Name, Purpose string
}

// InternalStore is what Load reads and writes of the store.
type InternalStore interface {
	GetSecretByName(ctx context.Context, org domain.OrgID, name string) (domain.Secret, error)
	PutSecret(ctx context.Context, s domain.Secret) error
}

// InternalDeps are what Load reads and writes with.
type InternalDeps struct {
	Store  InternalStore
	Sealer Sealer
	Now    func() time.Time
	NewID  func() string
}

// Load opens the value, creating it with create on first use; a replica
// that loses the race to create it reads the winner's. created says this
// call made it. The caller clears the plaintext when done.
func (in Internal) Load(ctx context.Context, d InternalDeps, create func() ([]byte, error)) (plain []byte, created bool, err error) {
	plain, err = in.read(ctx, d)
	if !errors.Is(err, store.ErrNotFound) {
		return plain, false, err
	}
	value, err := create()
	if err != nil {
		return nil, false, fmt.Errorf("create %s: %w", in.Name, err)
	}
	id := domain.SecretID(d.NewID())
	sealed, err := d.Sealer.Seal(value, AssociatedData(id))
	if err != nil {
		return nil, false, fmt.Errorf("seal %s: %w", in.Name, err)
	}
	meta, _ := json.Marshal(map[string]string{"purpose": in.Purpose})
	err = d.Store.PutSecret(ctx, domain.Secret{ID: id, Kind: in.Kind, Name: in.Name, Sealed: sealed, Meta: meta, CreatedAt: d.Now()})
	if errors.Is(err, store.ErrConflict) { // another replica made it first
		clear(value)
		plain, err = in.read(ctx, d)
		return plain, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("store %s: %w", in.Name, err)
	}
	return value, true, nil
}

func (in Internal) read(ctx context.Context, d InternalDeps) ([]byte, error) {
	s, err := d.Store.GetSecretByName(ctx, "", in.Name) // engrams's own: no organisation's
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", in.Name, err)
	}
	if s.Kind != in.Kind {
		return nil, fmt.Errorf("read %s: the secret named %s is a %s, not a %s", in.Name, in.Name, s.Kind, in.Kind)
	}
	plain, err := d.Sealer.Open(s.Sealed, AssociatedData(s.ID))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", in.Name, err)
	}
	return plain, nil
}
