package autorun

import (
	"context"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/domain"
)

// builtins are the automations each integration comes with, installed
// disabled when it is added: a user enables them, and edits them like any.
var builtins = map[domain.IntegrationKind][]string{
	domain.IntegrationSlack: {slackThreads},
}

// slackThreads starts a task from a mention, on the profile the message
// names ([profile=NAME]), else its channel's, else the default; the
// thread then carries the task (slackapp relays its turns and passes on
// replies).
const slackThreads = `name: slack-threads
trigger: {kind: slack_mention}
blocks:
  - {id: task, kind: start_task, profile: "{{trigger.profile}}", prompt: "{{trigger.text}}"}
`

// InstallBuiltins saves an integration's built-in automations that are
// not there yet, disabled, and names them.
func (r *Runner) InstallBuiltins(ctx context.Context, kind domain.IntegrationKind) ([]string, error) {
	var out []string
	for _, def := range builtins[kind] {
		d, _, err := r.decode([]byte(def))
		if err != nil {
			return out, fmt.Errorf("built-in automation: %w", err)
		}
		if _, err := r.st.GetAutomationByName(ctx, d.Name); err == nil {
			continue
		} else if !errors.Is(err, domain.ErrNotFound) {
			return out, err
		}
		if _, err := r.CreateAutomation(ctx, []byte(def), false); err != nil && !errors.Is(err, domain.ErrConflict) {
			return out, err
		}
		out = append(out, d.Name)
	}
	return out, nil
}
