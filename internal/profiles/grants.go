package profiles

import (
	"context"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// checkGrants adds a problem for each grant that is malformed or names a
// person who is not a member of org; the error is a failure to look.
func (c *Profiles) checkGrants(ctx context.Context, org domain.OrgID, grants []domain.Grant, probs *problems) error {
	if err := domain.CheckGrants(grants); err != nil {
		probs.add("grants: %s", err)
		return nil
	}
	for _, g := range grants {
		if g.Kind != domain.GrantUser {
			continue
		}
		_, err := c.st.GetMember(ctx, org, domain.UserID(g.Subject))
		if errors.Is(err, store.ErrNotFound) {
			probs.add("grants: %s is not a member of this organisation (see `engrams member list`)", g.Subject)
			continue
		}
		if err != nil {
			return fmt.Errorf("check grant to %s: %w", g.Subject, err)
		}
	}
	return nil
}
