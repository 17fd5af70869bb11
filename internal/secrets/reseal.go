package secrets

import (
	"context"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// resealPage is how many rows Reseal reads at once; maxResealFailures
// bounds the failures a report lists (all are counted).
const (
	resealPage        = 100
	maxResealFailures = 100
)

// Resealer is the sealer re-sealing needs (secret.Sealer is one): it opens
// with every key of its keyset and seals with the primary.
type Resealer interface {
	Sealer
	// UnderPrimary reports whether ciphertext is sealed with the primary
	// key already, so re-sealing it would change nothing.
	UnderPrimary(ciphertext []byte) bool
}

// ResealStore is what re-sealing walks (store.Store is one).
type ResealStore interface {
	ListSealed(ctx context.Context, kind domain.SealedKind, after string, limit int) ([]domain.SealedValue, error)
	ReplaceSealed(ctx context.Context, kind domain.SealedKind, id string, old, sealed []byte) error
}

// ResealDeps are what Reseal needs.
type ResealDeps struct {
	Store  ResealStore
	Sealer Resealer
	// Progress, if set, is told the counts of a kind after each page.
	Progress func(ResealCount)
}

// ResealCount is what re-sealing did with the rows of one kind.
type ResealCount struct {
	Kind     domain.SealedKind
	Seen     int // rows holding a sealed value
	Resealed int // re-sealed under the primary key now
	Current  int // already under the primary key
	Changed  int // changed meanwhile (re-sealed by another run, or deleted): left as they are
	Failed   int // could not be opened (sealed with a key the keyset lacks) or sealed
}

// ResealFailure is one row that could not be re-sealed; never its value.
type ResealFailure struct {
	Kind domain.SealedKind
	ID   string
	Err  string
}

// ResealReport is the outcome of Reseal: a count per kind, and the first
// failures.
type ResealReport struct {
	Counts   []ResealCount
	Failures []ResealFailure
}

// Failed is the number of rows that could not be re-sealed.
func (r ResealReport) Failed() int {
	n := 0
	for _, c := range r.Counts {
		n += c.Failed
	}
	return n
}

// Reseal re-seals every sealed row (every domain.SealedKinds kind: users'
// secrets, engrams's own such as the gateway key, registry credentials)
// that is not under the sealer's primary key yet. Each row is opened,
// sealed again with its own associated data and written back in one
// conditional write that applies only if the row still holds what was
// read, so running it while replicas serve, twice at once, or again after
// a crash loses nothing, and rows already re-sealed are skipped. A row
// that cannot be opened is counted and listed, not fatal; the error is a
// failure to read or write the store.
func Reseal(ctx context.Context, deps ResealDeps) (ResealReport, error) {
	if deps.Store == nil || deps.Sealer == nil {
		return ResealReport{}, errors.New("reseal: Store and Sealer are required")
	}
	var r ResealReport
	for _, kind := range domain.SealedKinds() {
		c, err := resealKind(ctx, deps, kind, &r)
		r.Counts = append(r.Counts, c)
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// resealKind re-seals the rows of one kind, a page at a time.
func resealKind(ctx context.Context, deps ResealDeps, kind domain.SealedKind, r *ResealReport) (ResealCount, error) {
	c := ResealCount{Kind: kind}
	for after := ""; ; {
		page, err := deps.Store.ListSealed(ctx, kind, after, resealPage)
		if err != nil {
			return c, fmt.Errorf("reseal %s rows: %w", kind, err)
		}
		if len(page) == 0 {
			return c, nil
		}
		for _, v := range page {
			after = v.ID
			c.Seen++
			failed, err := resealRow(ctx, deps, v, &c)
			if err != nil {
				return c, fmt.Errorf("reseal %s %s: %w", kind, v.ID, err)
			}
			if failed != nil {
				c.Failed++
				if len(r.Failures) < maxResealFailures {
					r.Failures = append(r.Failures, ResealFailure{Kind: kind, ID: v.ID, Err: failed.Error()})
				}
			}
		}
		if deps.Progress != nil {
			deps.Progress(c)
		}
		if err := ctx.Err(); err != nil {
			return c, fmt.Errorf("reseal %s rows: %w", kind, err)
		}
	}
}

// resealRow re-seals one row and counts what happened: failed is why the
// row could not be re-sealed, err a failure to write the store.
func resealRow(ctx context.Context, deps ResealDeps, v domain.SealedValue, c *ResealCount) (failed, err error) {
	if deps.Sealer.UnderPrimary(v.Sealed) {
		c.Current++
		return nil, nil
	}
	ad := v.Kind.AssociatedData(v.ID)
	plain, err := deps.Sealer.Open(v.Sealed, ad)
	if err != nil {
		return err, nil
	}
	sealed, err := deps.Sealer.Seal(plain, ad)
	clear(plain)
	if err != nil {
		return err, nil
	}
	switch err := deps.Store.ReplaceSealed(ctx, v.Kind, v.ID, v.Sealed, sealed); {
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		c.Changed++
	case err != nil:
		return nil, err
	default:
		c.Resealed++
	}
	return nil, nil
}
