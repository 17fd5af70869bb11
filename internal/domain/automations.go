package domain

import (
	"encoding/json"
	"time"
)

// AutomationID names an automation; AutomationRunID one of its runs.
type (
	AutomationID    string
	AutomationRunID string
)

// Automation is a stored automation: its current version's trigger, kept
// in columns so triggers find it, and whether it runs. Its definitions are
// AutomationVersions.
type Automation struct {
	ID          AutomationID
	Org         OrgID  // whose it is: its runs and their tasks are this organisation's
	Name        string // unique in the deployment
	Enabled     bool
	Version     int64  // the current version; a new run starts on it
	TriggerKind string // the current version's trigger kind
	HookSlug    string // webhook triggers: the path's {slug}; "" otherwise
	// HookSecret is the sealed webhook secret (Sealed of a SealedHookSecret);
	// nil without one. The API shows the plain secret once, when made.
	HookSecret []byte
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// AutomationVersion is one saved definition, as JSON.
type AutomationVersion struct {
	AutomationID AutomationID
	Version      int64
	Definition   json.RawMessage
	CreatedAt    time.Time
}

// RunState is where an automation run is; automations.Transition is the
// one rule of its changes.
type RunState string

// Run states.
const (
	RunQueued     RunState = "queued"     // waiting for a run with its concurrency key (policy queue)
	RunRunning    RunState = "running"    // executing its blocks
	RunWaiting    RunState = "waiting"    // in a wait_idle, or between loop passes
	RunSucceeded  RunState = "succeeded"  // every block done
	RunFailed     RunState = "failed"     // a block failed, or a limit was hit
	RunCancelled  RunState = "cancelled"  // by a user
	RunSuperseded RunState = "superseded" // a newer run with its key took over (policy supersede)
	RunSkipped    RunState = "skipped"    // another run with its key ran (policy skip), or a cap was reached
	RunRefused    RunState = "refused"    // its sender may not start it (recorded, never run)
)

// Terminal reports whether nothing happens to a run in s any more.
func (s RunState) Terminal() bool {
	switch s {
	case RunSucceeded, RunFailed, RunCancelled, RunSuperseded, RunSkipped, RunRefused:
		return true
	}
	return false
}

// AutomationRun is one run of one version of an automation.
type AutomationRun struct {
	ID           AutomationRunID
	AutomationID AutomationID
	Org          OrgID // its automation's organisation
	Version      int64 // the definition it runs, whatever is saved since
	State        RunState
	TriggerKind  string
	// DedupKey names the delivery that started it (a webhook's delivery
	// id, a schedule's occurrence, an Idempotency-Key): one run per key
	// per automation. "" for none.
	DedupKey       string
	ConcurrencyKey string          // the rendered settings key; "" for none
	Trigger        json.RawMessage // the trigger's payload
	Inputs         json.RawMessage // the resolved inputs
	Error          string          // why it failed, was cancelled or superseded
	// ActorID is the person who caused it: whose mention, pull request
	// or issue (mapped from the integration's identity), or who started
	// it by hand; "" for none (a schedule, a signed webhook).
	ActorID   UserID
	CreatedAt time.Time
	StartedAt time.Time
	EndedAt   time.Time
	UpdatedAt time.Time
}

// StepState is where one recorded step is.
type StepState string

// Step states.
const (
	StepRunning   StepState = "running"
	StepSucceeded StepState = "succeeded"
	StepFailed    StepState = "failed"
)

// RunStep is the record of one block's execution in a run: Seq orders a
// run's steps from 1; a block run again after a crash keeps its Seq and
// counts another Attempt.
type RunStep struct {
	RunID     AutomationRunID
	Seq       int64
	BlockID   string
	Kind      string
	Path      string // where the block is in the definition, e.g. blocks[2].body[0] pass 1
	State     StepState
	Attempt   int64
	Input     json.RawMessage // the block's rendered fields
	Output    string
	Error     string
	StartedAt time.Time
	EndedAt   time.Time
}
