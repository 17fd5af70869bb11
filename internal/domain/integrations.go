package domain

import (
	"encoding/json"
	"time"
)

// IntegrationKind names a service engrams talks to on users' behalf.
type IntegrationKind string

// Integration kinds.
const (
	IntegrationSlack  IntegrationKind = "slack"
	IntegrationGitHub IntegrationKind = "github"
	IntegrationLinear IntegrationKind = "linear"
)

// Integration is one configured service: its settings (not secret) and
// its credentials, sealed (a SealedIntegration).
type Integration struct {
	Kind      IntegrationKind
	Config    json.RawMessage
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ChatThread is a chat thread (a Slack thread) carrying a task: its
// replies go to the task, the task's turns come back to it. A relay
// holds it by lease while it posts.
type ChatThread struct {
	Kind    IntegrationKind
	Channel string
	Thread  string // the thread's root message id (Slack: its ts)
	TaskID  TaskID
	RunID   AutomationRunID // the run that started the task
	// TurnSeq is the task event seq of the current turn's prompt;
	// Message the bot message showing that turn (edited as it streams);
	// RelayedSeq the last task event relayed.
	TurnSeq    int64
	Message    string
	RelayedSeq int64
	LeaseOwner string
	LeaseUntil time.Time
	CreatedAt  time.Time
	UpdatedAt  time.Time
}
