package autorun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/engrams/engrams/internal/domain"
)

// builtins are the automations each integration comes with, installed
// disabled when it is added: a user enables them, and edits them like any.
var builtins = map[domain.IntegrationKind][]func(settings) (string, bool){
	domain.IntegrationSlack:  {func(settings) (string, bool) { return slackThreads, true }},
	domain.IntegrationGitHub: {prReviewFor},
	domain.IntegrationLinear: {func(settings) (string, bool) { return linearIssues, true }},
}

// settings are what built-ins read of their integration's settings.
type settings struct {
	Repos []string `json:"repos"`
}

// prReviewFor is pr-review on the configured repositories; none: it is
// not installed (a trigger names its repositories).
func prReviewFor(s settings) (string, bool) {
	if len(s.Repos) == 0 {
		return "", false
	}
	repos, _ := json.Marshal(s.Repos)
	return strings.Replace(prReview, "trigger: {kind: github_pr,", "trigger: {kind: github_pr, repos: "+string(repos)+",", 1), true
}

// linearIssues works on an issue labelled engrams: it says so on the
// issue, starts a task on the integration's profile and posts the result;
// with a repository in Linear's settings (trigger.repo), it opens a pull
// request of the task's changes there and posts its link.
const linearIssues = `name: linear-issues
trigger: {kind: linear_issue, labels: [engrams]}
settings: {max_concurrent: 4, max_per_hour: 30}
blocks:
  - {id: ack, kind: linear_comment, issue: "{{trigger.issue}}", text: "engrams is working on {{trigger.identifier}}."}
  - id: task
    kind: start_task
    profile: "{{trigger.profile}}"
    prompt: |
      {{trigger.identifier}}: {{trigger.title}}
      {{trigger.description}}
  - {id: idle, kind: wait_idle, task: task, timeout: 2h}
  - {id: result, kind: linear_comment, issue: "{{trigger.issue}}", text: "{{steps.idle.output}}"}
  - id: has_repo
    kind: condition
    if: "{{trigger.repo}}"
    then:
      - {id: pr, kind: open_pr, task: task, repo: "{{trigger.repo}}", title: "{{trigger.identifier}}: {{trigger.title}}"}
      - id: has_pr
        kind: condition
        if: "{{steps.pr.output}}"
        then:
          - {id: link, kind: linear_comment, issue: "{{trigger.issue}}", text: "Pull request: {{steps.pr.output}}"}
`

// prReview reviews a pull request on a reviewer profile (make it deny by
// default: no hosts, read-only credentials), for authors who are at least
// collaborators, at most 4 at once and 30 an hour, by the rules of the
// repository's AGENTS.md on the branch it goes into when there is one (the
// pull request's own copy is its author's to rewrite, so it is not read;
// comment events carry no base, so they read the default branch's): one
// review with inline comments; a new push supersedes a review still running.
const prReview = `name: pr-review
trigger: {kind: github_pr, events: [opened, synchronize, reopened, review_requested, comment], min_author: collaborator}
settings: {concurrency_key: "{{trigger.repo}}#{{trigger.number}}", policy: supersede, max_concurrent: 4, max_per_hour: 30}
blocks:
  - {id: rules, kind: github_file, repo: "{{trigger.repo}}", ref: "{{trigger.base_ref}}", path: AGENTS.md}
  - id: task
    kind: start_task
    profile: reviewer
    prompt: |
      Review pull request #{{trigger.number}} of {{trigger.repo}}: {{trigger.title}}
      (head {{trigger.head_sha}} on {{trigger.head_ref}}, into {{trigger.base_ref}}). {{trigger.command}}
      Answer with your review: one line per comment as path:line: comment, then a summary.
      The repository's rules for agents, from its AGENTS.md on {{trigger.base_ref}} (none if nothing follows):
      {{steps.rules.output}}
  - {id: idle, kind: wait_idle, task: task, timeout: 30m}
  - {id: review, kind: github_review, repo: "{{trigger.repo}}", number: "{{trigger.number}}", text: "{{steps.idle.output}}"}
  - {id: stop, kind: end_session, task: task}
`

// slackThreads starts a task from a mention, on the profile the message
// names ([profile=NAME]), else its channel's, else the default; the
// thread then carries the task (slackapp relays its turns and passes on
// replies).
const slackThreads = `name: slack-threads
trigger: {kind: slack_mention}
settings: {max_concurrent: 10, max_per_hour: 60}
blocks:
  - {id: task, kind: start_task, profile: "{{trigger.profile}}", prompt: "{{trigger.text}}"}
`

// InstallBuiltins saves, as org's, an integration's built-in automations
// that org has not got yet, disabled, and names them; config is the
// integration's settings (GitHub's repos).
func (r *Runner) InstallBuiltins(ctx context.Context, org domain.OrgID, kind domain.IntegrationKind, config json.RawMessage) ([]string, error) {
	var set settings
	_ = json.Unmarshal(config, &set)
	var out []string
	for _, build := range builtins[kind] {
		def, ok := build(set)
		if !ok {
			continue
		}
		d, _, err := r.decode([]byte(def))
		if err != nil {
			return out, fmt.Errorf("built-in automation: %w", err)
		}
		if _, err := r.st.GetAutomationByName(ctx, org, d.Name); err == nil {
			continue
		} else if !errors.Is(err, domain.ErrNotFound) {
			return out, err
		}
		if _, err := r.CreateAutomation(ctx, org, []byte(def), false); err != nil && !errors.Is(err, domain.ErrConflict) {
			return out, err
		}
		out = append(out, d.Name)
	}
	return out, nil
}

// Builtin is one built-in automation as offered to start from.
type Builtin struct {
	Name        string
	Integration domain.IntegrationKind
	Definition  string // YAML
}

// Builtins lists the built-in automations (pr-review on a placeholder
// repository, to be named).
func (r *Runner) Builtins() []Builtin {
	var out []Builtin
	for _, kind := range []domain.IntegrationKind{domain.IntegrationSlack, domain.IntegrationGitHub, domain.IntegrationLinear} {
		for _, build := range builtins[kind] {
			def, _ := build(settings{Repos: []string{"OWNER/NAME"}})
			d, _, err := r.decode([]byte(def))
			if err != nil {
				continue
			}
			out = append(out, Builtin{Name: d.Name, Integration: kind, Definition: def})
		}
	}
	return out
}
