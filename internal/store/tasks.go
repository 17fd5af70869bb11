package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/engrams/engrams/internal/domain"
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
	ID             domain.TaskID
	ProfileID      string
	ProfileVersion int64           // the profile version it started from
	Receipt        json.RawMessage // the grant receipt at start; opaque here
	Title          string
	State          TaskState
	SessionID      domain.SessionID // current session; "" when none
	EventSeq       int64            // seq of the last event; 0 before the first
	Error          string           // why it failed
	CreatedAt      time.Time
	UpdatedAt      time.Time // last change of state or session
}

// TaskSession records that a task used a session; Seq is gap-free per task,
// from 1, in attach order.
type TaskSession struct {
	TaskID    domain.TaskID
	Seq       int64
	SessionID domain.SessionID
	CreatedAt time.Time
}

// TaskEvent is one entry of a task's conversation (prompt, assistant text,
// tool call, tool result, file changed, usage, question, idle, error, ...).
// Seq is gap-free per task, from 1.
type TaskEvent struct {
	TaskID  domain.TaskID
	Seq     int64
	Type    string
	Payload json.RawMessage // opaque here
	At      time.Time
	// GuestSeq is the event's seq in its session's guest, an input of
	// IngestTaskEvents only (not stored).
	GuestSeq int64
}

// TaskFilter narrows ListTasks. Zero fields match everything.
type TaskFilter struct {
	ProfileID string
	States    []TaskState
}

// Tasks keeps tasks, the sessions they used and their conversation. The
// store does not notify: after AppendTaskEvents (and state or session
// changes) callers Notify topic "task:<id>", which followers (task show
// --follow) Subscribe to before re-reading with ListTaskEvents.
type Tasks interface {
	// CreateTask inserts t (ID and ProfileID required; State "" means
	// starting; EventSeq is ignored; UpdatedAt follows CreatedAt) and returns
	// the stored row. A non-empty SessionID is attached as the task's first
	// session in the same transaction. ErrConflict for a reused id,
	// ErrNotFound for an unknown profile (a deleted one is accepted).
	CreateTask(ctx context.Context, t Task) (Task, error)
	GetTask(ctx context.Context, id domain.TaskID) (Task, error)
	// ListTasks returns the tasks f matches, oldest first (CreatedAt, then ID).
	ListTasks(ctx context.Context, f TaskFilter) ([]Task, error)
	// SetTaskState sets the state and error message (errMsg "" clears it)
	// and stamps UpdatedAt with at. Not fenced: every state may follow every
	// other. ErrNotFound for an unknown task.
	SetTaskState(ctx context.Context, id domain.TaskID, state TaskState, errMsg string, at time.Time) error
	// ClaimTaskSetup stamps UpdatedAt with now if the task is starting and
	// either its UpdatedAt is at or before staleBefore (nobody renewed it:
	// a takeover) or it is exactly held (the stamp the caller wrote last: a
	// renewal), and reports whether it did. A renewal that fails means the
	// claim is lost (another replica took it, or the task left starting).
	// One conditional write: of concurrent claimers exactly one wins.
	ClaimTaskSetup(ctx context.Context, id domain.TaskID, now, staleBefore, held time.Time) (bool, error)
	// UpdateTaskState sets the state and error message and stamps
	// UpdatedAt, only while the task's state is one of from; it reports
	// whether it did. ErrNotFound for an unknown task.
	UpdateTaskState(ctx context.Context, id domain.TaskID, from []TaskState, state TaskState, errMsg string, at time.Time) (bool, error)
	// ReplaceSession makes newSessionID the task's current session and its
	// state starting, in one transaction, only while oldSessionID is its
	// current session (ErrConflict otherwise: another caller replaced it).
	// The new session is recorded like AttachSession's.
	ReplaceSession(ctx context.Context, taskID domain.TaskID, oldSessionID, newSessionID domain.SessionID, at time.Time) (TaskSession, error)
	// AttachSession makes sessionID the task's current session: in one
	// transaction it appends a task session with the next seq and sets
	// SessionID and UpdatedAt. Attaching the current session again is
	// idempotent (its row is returned, nothing is written). ErrNotFound for
	// an unknown task.
	AttachSession(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, at time.Time) (TaskSession, error)
	// ListTaskSessions returns the task's sessions in attach order.
	ListTaskSessions(ctx context.Context, taskID domain.TaskID) ([]TaskSession, error)
	// AppendTaskEvents appends events (Type required; TaskID and Seq are
	// ignored; a zero At means now) with the next gap-free seqs, in one
	// transaction that also sets the task's EventSeq to the last one, and
	// returns them as stored. Concurrent appenders, on any replica, get
	// disjoint consecutive runs. ErrNotFound for an unknown task; nothing is
	// written on any error. No events: nothing is written, nil returned.
	AppendTaskEvents(ctx context.Context, taskID domain.TaskID, events []TaskEvent) ([]TaskEvent, error)
	// IngestTaskEvents appends the events sessionID's guest produced that
	// the task has not taken yet: those whose GuestSeq is above the task
	// session's cursor, in the order given (GuestSeqs must increase). When
	// rewoundTo is set and below the cursor, the cursor is first lowered to
	// it (the guest was restored to an older state, which has fewer events;
	// the events taken from the lost state stay). In the same transaction
	// it moves the cursor to the last GuestSeq appended and the task's
	// EventSeq. It returns the cursor and the appended events (numbered
	// like AppendTaskEvents). No events: only the cursor is read (and
	// lowered). ErrNotFound if sessionID is not one of the task's sessions.
	IngestTaskEvents(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, rewoundTo *int64, events []TaskEvent) (int64, []TaskEvent, error)
	// TaskBySession returns the task whose current session is sessionID,
	// else ErrNotFound.
	TaskBySession(ctx context.Context, sessionID domain.SessionID) (Task, error)
	// ListTaskEvents returns up to limit events with seq > afterSeq, in
	// order; limit <= 0 means no limit. An unknown task has no events.
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]TaskEvent, error)
}
