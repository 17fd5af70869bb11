package automations

import "github.com/engrams/engrams/internal/domain"

// Definition is one version of an automation: what starts it, what it
// takes, what it does and how its runs share.
type Definition struct {
	Name     string   `json:"name" yaml:"name"`
	Trigger  Trigger  `json:"trigger" yaml:"trigger"`
	Inputs   []Input  `json:"inputs,omitempty" yaml:"inputs,omitempty"`
	Blocks   []Block  `json:"blocks" yaml:"blocks"`
	Settings Settings `json:"settings,omitempty" yaml:"settings,omitempty"`
}

// TriggerKind is what starts runs.
type TriggerKind string

// Trigger kinds.
const (
	TriggerManual       TriggerKind = "manual"        // the dashboard or `automation run`, with inputs
	TriggerSchedule     TriggerKind = "schedule"      // a cron schedule in an IANA time zone
	TriggerWebhook      TriggerKind = "webhook"       // POST /v1/hooks/{slug}, signed
	TriggerSlackMention TriggerKind = "slack_mention" // a mention of the app in a channel
	TriggerGitHubPR     TriggerKind = "github_pr"     // pull request events, review requests, @engrams comments
	TriggerLinearIssue  TriggerKind = "linear_issue"  // an issue created or labelled
)

// Integration is the integration whose events start runs of k ("" for
// the kinds no integration delivers: manual, schedule, webhook).
func (k TriggerKind) Integration() domain.IntegrationKind {
	switch k {
	case TriggerSlackMention:
		return domain.IntegrationSlack
	case TriggerGitHubPR:
		return domain.IntegrationGitHub
	case TriggerLinearIssue:
		return domain.IntegrationLinear
	}
	return ""
}

// Trigger says what starts runs; the field of its Kind is set.
type Trigger struct {
	Kind     TriggerKind `json:"kind" yaml:"kind"`
	Cron     string      `json:"cron,omitempty" yaml:"cron,omitempty"`           // schedule: five fields
	TimeZone string      `json:"time_zone,omitempty" yaml:"time_zone,omitempty"` // schedule: IANA name; default UTC
	Slug     string      `json:"slug,omitempty" yaml:"slug,omitempty"`           // webhook: the path's {slug}
	Channels []string    `json:"channels,omitempty" yaml:"channels,omitempty"`   // slack_mention: channel ids (none: every channel)
	Repos    []string    `json:"repos,omitempty" yaml:"repos,omitempty"`         // github_pr: owner/name
	Events   []string    `json:"events,omitempty" yaml:"events,omitempty"`       // github_pr: opened, synchronize, reopened, review_requested, comment
	Labels   []string    `json:"labels,omitempty" yaml:"labels,omitempty"`       // linear_issue: labels that start a run (none: created)
	// MinAuthor is github_pr's floor: the lowest author association (of
	// the pull request's author, or of an @engrams comment's) that starts
	// runs; below it a delivery is recorded as a refused run. Default
	// collaborator (owners, members and collaborators).
	MinAuthor string `json:"min_author,omitempty" yaml:"min_author,omitempty"`
}

// InputType is the type of an input's value.
type InputType string

// Input types.
const (
	InputString  InputType = "string"
	InputNumber  InputType = "number"
	InputBoolean InputType = "boolean"
	InputJSON    InputType = "json"
)

// Input is one typed parameter of a run.
type Input struct {
	Name     string    `json:"name" yaml:"name"`
	Type     InputType `json:"type" yaml:"type"`
	Default  any       `json:"default,omitempty" yaml:"default,omitempty"`
	Required bool      `json:"required,omitempty" yaml:"required,omitempty"`
}

// BlockKind is what a block does.
type BlockKind string

// Block kinds.
const (
	BlockStartTask     BlockKind = "start_task"     // Profile, Prompt
	BlockSendPrompt    BlockKind = "send_prompt"    // Task (a start_task's id), Prompt
	BlockWaitIdle      BlockKind = "wait_idle"      // Task, Timeout
	BlockRunCommand    BlockKind = "run_command"    // Task, Command
	BlockReadFile      BlockKind = "read_file"      // Task, Path
	BlockWriteFile     BlockKind = "write_file"     // Task, Path, Content
	BlockCondition     BlockKind = "condition"      // If, Then, Else
	BlockLoop          BlockKind = "loop"           // Max, While, Body
	BlockPostSlack     BlockKind = "post_slack"     // Channel, Text
	BlockGitHubComment BlockKind = "github_comment" // Repo, Number, Text
	BlockGitHubReview  BlockKind = "github_review"  // Repo, Number, Text (inline comments from the task's review)
	BlockOpenPR        BlockKind = "open_pr"        // Task, Repo, Title: the URL, "" when the task changed nothing
	BlockGitHubFile    BlockKind = "github_file"    // Repo, Ref, Path: the file's text, "" when it has none
	BlockLinearComment BlockKind = "linear_comment" // Issue, Text
	BlockEndSession    BlockKind = "end_session"    // Task
)

// Block is one step of a definition. Its ID is unique in the definition
// and names its output to later blocks ({{steps.ID.output}}); the fields
// its Kind uses are set, the others empty. Text fields are templates.
type Block struct {
	ID      string    `json:"id" yaml:"id"`
	Kind    BlockKind `json:"kind" yaml:"kind"`
	Profile string    `json:"profile,omitempty" yaml:"profile,omitempty"`
	Task    string    `json:"task,omitempty" yaml:"task,omitempty"`
	Prompt  string    `json:"prompt,omitempty" yaml:"prompt,omitempty"`
	Command string    `json:"command,omitempty" yaml:"command,omitempty"` // run_command: shell text, no templates: values come in Env
	// Env is run_command's environment: each value a template, so what
	// came from outside reaches the command as $NAME, never as its text.
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Path    string            `json:"path,omitempty" yaml:"path,omitempty"`
	Content string            `json:"content,omitempty" yaml:"content,omitempty"`
	Channel string            `json:"channel,omitempty" yaml:"channel,omitempty"`
	Repo    string            `json:"repo,omitempty" yaml:"repo,omitempty"`
	Number  string            `json:"number,omitempty" yaml:"number,omitempty"`
	Issue   string            `json:"issue,omitempty" yaml:"issue,omitempty"`
	Title   string            `json:"title,omitempty" yaml:"title,omitempty"`
	Ref     string            `json:"ref,omitempty" yaml:"ref,omitempty"` // github_file: a branch, tag or commit (default: the default branch)
	Text    string            `json:"text,omitempty" yaml:"text,omitempty"`
	Timeout string            `json:"timeout,omitempty" yaml:"timeout,omitempty"` // wait_idle: a Go duration, at most Limits.MaxWait
	If      string            `json:"if,omitempty" yaml:"if,omitempty"`           // condition: a template; true unless "", "0" or "false"
	While   string            `json:"while,omitempty" yaml:"while,omitempty"`     // loop: as If, checked before each pass
	Max     int               `json:"max,omitempty" yaml:"max,omitempty"`         // loop: passes at most
	Then    []Block           `json:"then,omitempty" yaml:"then,omitempty"`
	Else    []Block           `json:"else,omitempty" yaml:"else,omitempty"`
	Body    []Block           `json:"body,omitempty" yaml:"body,omitempty"`
}

// Policy is what a run does when another with its concurrency key runs.
type Policy string

// Concurrency policies.
const (
	PolicyQueue     Policy = "queue"     // wait for it (the default)
	PolicySupersede Policy = "supersede" // cancel it and run
	PolicySkip      Policy = "skip"      // do not run
)

// Settings shape how runs share.
type Settings struct {
	// ConcurrencyKey is a template (e.g. "{{trigger.repo}}#{{trigger.number}}");
	// runs with the same key follow Policy. Empty: runs never wait.
	ConcurrencyKey string `json:"concurrency_key,omitempty" yaml:"concurrency_key,omitempty"`
	Policy         Policy `json:"policy,omitempty" yaml:"policy,omitempty"`
	// MaxConcurrent and MaxPerHour cap the runs its triggers start
	// (manual runs are not capped): over a cap a run is recorded as
	// skipped, saying which. 0 is the default (DefaultMaxConcurrent,
	// DefaultMaxPerHour); -1 is no cap.
	MaxConcurrent int `json:"max_concurrent,omitempty" yaml:"max_concurrent,omitempty"`
	MaxPerHour    int `json:"max_per_hour,omitempty" yaml:"max_per_hour,omitempty"`
}

// The caps of runs started by triggers when the settings name none.
const (
	DefaultMaxConcurrent = 10
	DefaultMaxPerHour    = 120
)

// Caps are s's caps with the defaults filled in (0: no cap).
func (s Settings) Caps() (maxConcurrent, maxPerHour int) {
	pick := func(v, def int) int {
		switch {
		case v == 0:
			return def
		case v < 0:
			return 0
		}
		return v
	}
	return pick(s.MaxConcurrent, DefaultMaxConcurrent), pick(s.MaxPerHour, DefaultMaxPerHour)
}
