package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// printTaskHeader writes what `task get` says of a task above its
// conversation: state and session, profile and model, who started it and
// when, its tokens and their cost. The profile's name is looked up; its id
// stands in when that fails.
func (a taskCmds) printTaskHeader(ctx context.Context, w io.Writer, c *client.Client, t apiv1.Task) {
	fmt.Fprintf(w, "task %s: %s\n", t.ID, t.Title)
	fmt.Fprintf(w, "state: %s   session: %s\n", t.State, orDash(t.SessionID))
	if t.Error != "" {
		fmt.Fprintf(w, "error: %s\n", t.Error)
	}
	profile := t.ProfileID
	if p, err := c.Profiles().Get(ctx, t.ProfileID); err == nil {
		profile = p.Profile.Name
	}
	model := t.Usage.Model
	if model == "" && t.Receipt != nil {
		model = t.Receipt.Model
	}
	fmt.Fprintf(w, "profile: %s (version %d)   model: %s\n", profile, t.ProfileVersion, orDash(model))
	starter := "a user (API, CLI or dashboard)"
	if t.RunID != "" {
		starter = "automation run " + t.RunID
	}
	fmt.Fprintf(w, "started by: %s\n", starter)
	fmt.Fprintf(w, "created: %s   updated: %s\n", a.whenAgo(t.CreatedAt), a.whenAgo(t.UpdatedAt))
	u := t.Usage
	fmt.Fprintf(w, "tokens: %s   cost: %s\n", tokensText(u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheWriteTokens), taskCost(u))
	fmt.Fprintln(w)
}

// taskCost is a task's cost for a person, saying how many usage events
// it leaves out for want of a price.
func taskCost(u apiv1.TaskUsage) string {
	s := money(u.Cost)
	if u.Unpriced > 0 {
		s += fmt.Sprintf(" (+%d not priced)", u.Unpriced)
	}
	return s
}
