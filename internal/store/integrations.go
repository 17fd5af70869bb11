package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Integrations keeps the services engrams talks to, the deliveries they
// sent, and the chat threads that carry tasks.
type Integrations interface {
	// PutIntegration inserts or replaces in.Org's integration of in.Kind:
	// one of a kind in the deployment, so ErrConflict when another
	// organisation holds it.
	PutIntegration(ctx context.Context, in domain.Integration) (domain.Integration, error)
	// GetIntegration is the deployment's integration of kind, whoever holds
	// it (its events name no organisation: the integration's does).
	GetIntegration(ctx context.Context, kind domain.IntegrationKind) (domain.Integration, error)
	ListIntegrations(ctx context.Context, org domain.OrgID) ([]domain.Integration, error)
	// DeleteIntegration removes org's integration of kind; ErrNotFound when
	// org holds none.
	DeleteIntegration(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind) error
	// RecordDelivery remembers a delivery by (source, key) until expires:
	// true the first time, false for one seen before. Deliveries whose
	// expiry is before at are forgotten first.
	RecordDelivery(ctx context.Context, source, key string, at, expires time.Time) (bool, error)
	// ForgetDelivery forgets a delivery recorded that started nothing, so
	// its retry is taken.
	ForgetDelivery(ctx context.Context, source, key string) error
	// PutThread inserts a thread unless it exists: then it returns that
	// one and created false.
	PutThread(ctx context.Context, t domain.ChatThread) (thread domain.ChatThread, created bool, err error)
	GetThread(ctx context.Context, kind domain.IntegrationKind, channel, thread string) (domain.ChatThread, error)
	// ClaimThreads leases to owner, until until, up to limit threads whose
	// task has events after the thread's RelayedSeq and whose lease is
	// free, expired at now, or owner's already; it returns them.
	ClaimThreads(ctx context.Context, owner string, now, until time.Time, limit int) ([]domain.ChatThread, error)
	// UpdateThread records a relay's progress (TurnSeq, Message,
	// RelayedSeq) while owner holds the thread's lease; ErrConflict when
	// it no longer does.
	UpdateThread(ctx context.Context, t domain.ChatThread, owner string) error
	// PutIdentity maps an integration account to a user (replacing an
	// earlier mapping of the account in the organisation).
	PutIdentity(ctx context.Context, id domain.Identity) error
	// GetIdentity is the mapping of an account in an organisation;
	// ErrNotFound when it has none.
	GetIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) (domain.Identity, error)
	// ListIdentities lists a user's mappings in an organisation, by kind
	// then account.
	ListIdentities(ctx context.Context, org domain.OrgID, user domain.UserID) ([]domain.Identity, error)
	// DeleteIdentity removes a mapping; an unknown one is ErrNotFound.
	DeleteIdentity(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, externalID string) error
	// CreateIdentityCode keeps a link code (by its hash); expired codes
	// are forgotten first.
	CreateIdentityCode(ctx context.Context, c domain.IdentityCode) error
	// TakeIdentityCode returns the code with hash and forgets it, in one
	// write, so it is taken once; ErrNotFound for an unknown, taken or
	// expired (before now) code.
	TakeIdentityCode(ctx context.Context, hash string, now time.Time) (domain.IdentityCode, error)
}
