package domain

import (
	"encoding/json"
	"time"
)

// TaskState is where a task is.
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
	ProfileID      string
	ProfileVersion int64           // the profile version it started from
	Receipt        json.RawMessage // the grant receipt at start; opaque here
	Title          string
	State          TaskState
	SessionID      SessionID // current session; "" when none
	EventSeq       int64     // seq of the last event; 0 before the first
	EventBytes     int64     // bytes of its events (TaskEvent.Bytes of each)
	Error          string    // why it failed
	CreatedAt      time.Time
	UpdatedAt      time.Time // last change of state or session
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
}

// Bytes is what an event counts toward its task's EventBytes: its type
// and payload as stored.
func (e TaskEvent) Bytes() int64 { return int64(len(e.Type) + len(e.Payload)) }

// TaskFilter narrows ListTasks. Zero fields match everything.
type TaskFilter struct {
	ProfileID string
	States    []TaskState
	// Keyset pagination in the list's order (created_at, then id): tasks
	// after (AfterCreated, AfterID) when AfterID is set, at most Limit (0:
	// no limit).
	AfterCreated time.Time
	AfterID      TaskID
	Limit        int
}
