package connector

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// Source names where deliveries come from; each integration is one.
type Source string

// The sources there are.
const (
	SourceHook   Source = "hook" // signed webhooks, POST /v1/hooks/{slug}
	SourceSlack  Source = "slack"
	SourceGitHub Source = "github"
	SourceLinear Source = "linear"
)

// Errors callers branch on.
var (
	// ErrBadSignature is every refusal of a delivery's signature or
	// timestamp (and a hook slug that names nothing: said the same way).
	ErrBadSignature = errors.New("signature refused")
	// ErrNotConfigured is a delivery or a block for an integration that
	// is not configured.
	ErrNotConfigured = errors.New("integration not configured")
)

// Request is one delivery as received: its body already read, bounded.
type Request struct {
	Header http.Header
	Body   []byte
	Slug   string // a signed webhook's {slug}
}

// Verified is a delivery whose signature checked out.
type Verified struct {
	// Covered is what the delivery is known by, all of it covered by the
	// signature: the body (with the timestamp where the scheme signs one
	// and a retry repeats it), or the signed fields that name the event
	// where the sender stamps each retry anew (Slack's event id, Linear's
	// issue and change). Deliveries are deduplicated on its hash, never on
	// an id header the signature does not cover.
	Covered []byte
	// KeepFor is how long a delivery is remembered: at least the scheme's
	// replay window (GitHub has none: a week).
	KeepFor time.Duration
	// Automation is the one automation a signed webhook is for.
	Automation domain.AutomationID
	// Hint is the sender's delivery id, for logs only.
	Hint string
}

// Meaning is what a verified delivery asks for.
type Meaning struct {
	// Answer is answered as it is, nothing started or remembered (Slack's
	// url_verification challenge, GitHub's ping).
	Answer any
	// Ignored says why the delivery starts nothing (an event no trigger
	// takes); it is still remembered.
	Ignored string
	// Starts are the runs it starts.
	Starts []Start
	// Refusals are attempts to steer runs that the sender may not make
	// (a Slack reply from another user in a task's thread): each is
	// recorded as a refused run of the automation of the run named.
	Refusals []Refusal
	// After runs once per delivery (not for one seen before), after the
	// runs started: a reaction, a reply saying why nothing started, a
	// thread reply sent to its task.
	After func(ctx context.Context, started []Started) error
}

// Start starts a run of each enabled automation whose trigger is of kind
// Trigger (only Automation, when set) and that Admit takes.
type Start struct {
	Trigger    string // a trigger kind: slack_mention, github_pr, linear_issue, webhook
	Automation domain.AutomationID
	// Payload is the typed event: JSON-encoded, it is the runs' trigger
	// payload ({{trigger.…}} in templates).
	Payload any
	Inputs  map[string]any // the run's inputs (signed webhooks)
	// Actor is the engrams user the sender is (their mapped identity);
	// "" for none. The runs record it and their tasks are theirs.
	Actor domain.UserID
	// Admit judges each automation's trigger: Match false is not for it;
	// Refused (with Match) records a refused run saying why.
	Admit func(Trigger) Admission
}

// Trigger is what Admit sees of an automation's trigger.
type Trigger struct {
	Channels  []string // Slack channel ids (none: every channel)
	Repos     []string // GitHub owner/name
	Events    []string // GitHub events
	Labels    []string // Linear labels
	MinAuthor string   // GitHub: the lowest author association that starts runs
}

// Admission is Admit's verdict on one trigger.
type Admission struct {
	Match   bool
	Refused string // non-empty: the sender may not start it, and why
}

// Admit is an Admission that takes every trigger.
func Admit(Trigger) Admission { return Admission{Match: true} }

// Refusal is an attempt refused outside any trigger match.
type Refusal struct {
	Run     domain.AutomationRunID // whose automation records it
	Reason  string
	Payload any
}

// Started is one run a delivery started, or found started by the same
// delivery before (Created false), or recorded as skipped or refused.
type Started struct {
	Run     domain.AutomationRun
	Created bool
}

// Receiver is the delivery side of an integration.
type Receiver interface {
	Source() Source
	// MaxBody bounds a delivery's body: a larger one is refused before
	// it is read.
	MaxBody() int64
	// Verify checks a delivery's signature (and timestamp) with the
	// integration's secret; every refusal wraps ErrBadSignature, and an
	// integration not configured wraps ErrNotConfigured.
	Verify(ctx context.Context, req Request) (Verified, error)
	// Decode says what a verified delivery means. It is called for every
	// delivery, seen before or not; what it does once goes in After.
	Decode(ctx context.Context, v Verified, req Request) (Meaning, error)
}

// Run is what a block sees of the run it belongs to.
type Run struct {
	ID      domain.AutomationRunID
	Trigger string          // the trigger kind that started it
	Payload json.RawMessage // the trigger's payload
}

// Call is one block to execute.
type Call struct {
	Kind   string
	Fields map[string]string // the block's fields, rendered: repo, number, text, ...
	Task   domain.TaskID     // the task it names ("" for none)
	Run    Run
	// Key names this block's one effect: a block run again after a crash
	// finds what it made under the key instead of making it twice.
	Key string
}

// Blocks is the block side of an integration.
type Blocks interface {
	// BlockKinds are the kinds Execute takes.
	BlockKinds() []string
	// Escape makes a value placed in a block's field safe where the
	// block posts it (Slack mrkdwn, Markdown mentions): the automation's
	// own text in the field is left as written.
	Escape(field, value string) string
	// Execute runs one block and returns its output; an integration not
	// configured wraps ErrNotConfigured.
	Execute(ctx context.Context, call Call) (string, error)
}

// ProfileGate is an integration whose grant names the profiles its runs'
// tasks may use (Slack: each channel's); a start_task of a run it started
// on another profile fails, whatever the automation says.
type ProfileGate interface {
	AllowProfile(ctx context.Context, run Run, profile string) error
}

// TaskFollower is an integration that follows the tasks its runs start
// (Slack: the thread carries the task from then on).
type TaskFollower interface {
	TaskStarted(ctx context.Context, run Run, task domain.TaskID) error
}

// Settings opens an integration's settings and credentials
// (integrations.Service); ErrNotFound when it is not configured.
type Settings interface {
	Open(ctx context.Context, kind domain.IntegrationKind) (json.RawMessage, map[string]string, error)
	// Holder is the organisation holding the integration of kind: the
	// one whose members its accounts map to.
	Holder(ctx context.Context, kind domain.IntegrationKind) (domain.OrgID, error)
}
