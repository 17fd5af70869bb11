package domain

import (
	"encoding/json"
	"time"
)

// TaskState is where a task is; tasks.Transition is the one rule of its
// changes.
type TaskState string

const (
	TaskStarting TaskState = "starting" // its first session is being placed and the harness started
	TaskRunning  TaskState = "running"  // the agent is working on a prompt
	TaskIdle     TaskState = "idle"     // waiting for a follow-up; its session may be suspended
	TaskStopped  TaskState = "stopped"  // stopped by a user
	TaskFailed   TaskState = "failed"   // Error says why
)

// Valid reports whether s is one of the task states.
func (s TaskState) Valid() bool {
	switch s {
	case TaskStarting, TaskRunning, TaskIdle, TaskStopped, TaskFailed:
		return true
	}
	return false
}

// Task is an agent's work started from a profile and a prompt. It owns one or
// more sessions (a new one when the previous one cannot be resumed); its
// conversation, the task events, is continuous across them.
type Task struct {
	ID             TaskID
	ProfileID      ProfileID
	ProfileVersion int64           // the profile version it started from
	Receipt        json.RawMessage // the grant receipt at start; opaque here
	Title          string
	State          TaskState
	SessionID      SessionID // current session; "" when none
	EventSeq       int64     // seq of the last event; 0 before the first
	EventBytes     int64     // bytes of its events (TaskEvent.Bytes of each)
	Error          string    // why it failed
	// RunID is the automation run that started it; "" when a user did
	// (through the API, the CLI or the dashboard).
	RunID AutomationRunID
	// StartedBy is the name of the API token a user started it with (the
	// CLI's, or the dashboard's sign-in); "" for a run, or where unknown.
	StartedBy string
	// Owner is whose it is: who started it (an automation's task is the
	// organisation's, shared) and who else may see it.
	Owner     Owner
	Usage     TaskUsage // what its turns used, summed as their usage events came
	CreatedAt time.Time
	UpdatedAt time.Time // last change of state or session
}

// Money is an exact amount in millionths of a currency's unit
// (micro-dollars for USD); never a float.
type Money struct {
	Micros   int64
	Currency string // ISO 4217 code; "" for no amount
}

// Tokens counts a model's tokens. Input counts every input token, cached
// ones included; CacheRead and CacheWrite are the parts of it read from
// and written to the provider's prompt cache.
type Tokens struct {
	Input, Output, CacheRead, CacheWrite int64
}

// Add is t and u summed.
func (t Tokens) Add(u Tokens) Tokens {
	return Tokens{t.Input + u.Input, t.Output + u.Output, t.CacheRead + u.CacheRead, t.CacheWrite + u.CacheWrite}
}

// TurnUsage is one usage event of a turn: one model's tokens and, when
// priced, their cost with the price table it was reckoned from.
type TurnUsage struct {
	Model      string
	Tokens     Tokens
	Cost       Money  // Currency "": not priced (the model is in no table and the harness said no cost)
	PriceTable string // the table's id and version, e.g. "engrams-2025-10"; "harness" when the harness reckoned it
}

// TaskUsage is a task's usage over its turns.
type TaskUsage struct {
	Model    string // the model of its last usage event that named one
	Tokens   Tokens
	Cost     Money // the sum of its priced usage events
	Unpriced int64 // usage events with tokens but no cost
}

// TaskSession records that a task used a session; Seq is gap-free per task,
// from 1, in attach order.
type TaskSession struct {
	TaskID    TaskID
	Seq       int64
	SessionID SessionID
	CreatedAt time.Time
}

// TaskEvent is one entry of a task's conversation (prompt, assistant text,
// tool call, tool result, file changed, usage, question, idle, error, ...).
// Seq is gap-free per task, from 1.
type TaskEvent struct {
	TaskID  TaskID
	Seq     int64
	Type    string
	Payload json.RawMessage // opaque here
	At      time.Time
	// GuestSeq is the event's seq in its session's guest, an input of
	// IngestTaskEvents only (not stored).
	GuestSeq int64
	// Usage, on a usage event, is what the store adds to its task's
	// Usage as the event is appended (an input only; the payload says it
	// for readers).
	Usage *TurnUsage
}

// Bytes is what an event counts toward its task's EventBytes: its type
// and payload as stored.
func (e TaskEvent) Bytes() int64 { return int64(len(e.Type) + len(e.Payload)) }

// TaskFilter narrows ListTasks. Zero fields match everything.
type TaskFilter struct {
	// Viewer, when set, keeps the tasks it Sees (the API's lists); nil
	// is every task.
	Viewer    *Viewer
	ProfileID ProfileID
	States    []TaskState
	// Keyset pagination in the list's order (created_at, then id): tasks
	// after (AfterCreated, AfterID) when AfterID is set, at most Limit (0:
	// no limit).
	AfterCreated time.Time
	AfterID      TaskID
	Limit        int
}
