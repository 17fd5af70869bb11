package store

import (
	"context"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

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
	CreateTask(ctx context.Context, t domain.Task) (domain.Task, error)
	GetTask(ctx context.Context, id domain.TaskID) (domain.Task, error)
	// ListTasks returns the tasks f matches, oldest first (CreatedAt, then ID).
	ListTasks(ctx context.Context, f domain.TaskFilter) ([]domain.Task, error)
	// SetTaskState sets the state and error message (errMsg "" clears it)
	// and stamps UpdatedAt with at. Not fenced: every state may follow every
	// other. ErrNotFound for an unknown task.
	SetTaskState(ctx context.Context, id domain.TaskID, state domain.TaskState, errMsg string, at time.Time) error
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
	UpdateTaskState(ctx context.Context, id domain.TaskID, from []domain.TaskState, state domain.TaskState, errMsg string, at time.Time) (bool, error)
	// ReplaceSession makes newSessionID the task's current session and its
	// state starting (what tasks.Transition gives a continued task), in one
	// transaction, only while oldSessionID is its current session and its
	// state is one of from (ErrConflict otherwise: another caller replaced
	// it, or the task moved on meanwhile, e.g. was stopped). The new
	// session is recorded like AttachSession's.
	ReplaceSession(ctx context.Context, taskID domain.TaskID, from []domain.TaskState, oldSessionID, newSessionID domain.SessionID, at time.Time) (domain.TaskSession, error)
	// AttachSession makes sessionID the task's current session: in one
	// transaction it appends a task session with the next seq and sets
	// SessionID and UpdatedAt. Attaching the current session again is
	// idempotent (its row is returned, nothing is written). ErrNotFound for
	// an unknown task.
	AttachSession(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID, at time.Time) (domain.TaskSession, error)
	// ListTaskSessions returns the task's sessions in attach order.
	ListTaskSessions(ctx context.Context, taskID domain.TaskID) ([]domain.TaskSession, error)
	// AppendTaskEvents appends events (Type required; TaskID and Seq are
	// ignored; a zero At means now) with the next gap-free seqs, in one
	// transaction that also sets the task's EventSeq to the last one and
	// adds their Bytes to its EventBytes, and returns them as stored. No
	// quota refuses them (the coordinator's own events: prompts, notes).
	// Concurrent appenders, on any replica, get
	// disjoint consecutive runs. ErrNotFound for an unknown task; nothing is
	// written on any error. No events: nothing is written, nil returned.
	AppendTaskEvents(ctx context.Context, taskID domain.TaskID, events []domain.TaskEvent) ([]domain.TaskEvent, error)
	// IngestTaskEvents appends the events in.SessionID's guest produced
	// that the task has not taken yet: those whose GuestSeq is above the
	// task session's cursor (the fresh ones), in the order given (GuestSeqs
	// must increase), as far as in.Quota admits them. When in.RewoundTo is
	// set and below the cursor, the cursor is first lowered to it (the
	// guest was restored to an older state, which has fewer events; the
	// events taken from the lost state stay). In the same transaction it
	// moves the cursor to the last fresh GuestSeq, appended or dropped (a
	// dropped event is acknowledged: the host does not send it again), and
	// the task's EventSeq and EventBytes. No events: only the cursor is read
	// (and lowered). ErrNotFound if the session is not one of the task's.
	IngestTaskEvents(ctx context.Context, in TaskIngest) (TaskIngested, error)
	// TaskBySession returns the task whose current session is sessionID,
	// else ErrNotFound.
	TaskBySession(ctx context.Context, sessionID domain.SessionID) (domain.Task, error)
	// ListTaskEvents returns up to limit events with seq > afterSeq, in
	// order; limit <= 0 means no limit. An unknown task has no events.
	ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error)
	// QueryTaskEvents returns one page of the task's events that q
	// selects. An unknown task has no events; a q out of its bounds is
	// refused (domain.ErrInvalid).
	QueryTaskEvents(ctx context.Context, taskID domain.TaskID, q TaskEventQuery) ([]domain.TaskEvent, error)
}

// Bounds of a TaskEventQuery.
const (
	MaxTaskEventPage  = 1000 // events in one page
	MaxTaskEventTypes = 8    // types one query may name
)

// TaskEventQuery selects a page of a task's events.
type TaskEventQuery struct {
	Types     []string // only events of these types; none: every type
	AfterSeq  int64    // only seq > AfterSeq
	BeforeSeq int64    // only seq < BeforeSeq; 0: no upper bound
	Newest    bool     // newest first (else oldest first)
	Limit     int      // events in the page: 1 to MaxTaskEventPage
}

// TaskIngest is one IngestTaskEvents call.
type TaskIngest struct {
	TaskID    domain.TaskID
	SessionID domain.SessionID
	RewoundTo *int64
	Events    []domain.TaskEvent // Type required; GuestSeq increasing
	Quota     TaskQuota
}

// What drops a guest's fresh events in IngestTaskEvents: the keys of
// TaskQuota.Notes and TaskIngested.Dropped.
const (
	QuotaEvents = "events"      // the task's EventSeq would pass MaxEvents
	QuotaBytes  = "event_bytes" // the task's EventBytes would pass MaxBytes
	QuotaRate   = "ingest_rate" // more fresh events than Admit
)

// TaskQuota bounds what one IngestTaskEvents appends. Fresh events are
// taken in order while the task's EventSeq stays at most MaxEvents and its
// EventBytes at most MaxBytes (every event of the task counts, whoever
// wrote it; 0: no bound), and at most *Admit of them (the caller's rate
// limit; nil: no bound). The first event that does not fit and every
// later one of the call are dropped, under the first bound they break.
type TaskQuota struct {
	MaxEvents int64
	MaxBytes  int64
	Admit     *int
	// Notes are the events appended after the guest's when a bound drops
	// events: Notes[QuotaEvents] and Notes[QuotaBytes] once per task (the
	// task records that it had the note), Notes[QuotaRate] at every call
	// that has it. A note is never dropped; it counts like any event.
	Notes map[string]domain.TaskEvent
}

// TaskIngested is what one IngestTaskEvents did.
type TaskIngested struct {
	Cursor  int64
	Added   []domain.TaskEvent // numbered like AppendTaskEvents': the guest's, then the notes
	Dropped map[string]int     // fresh events not appended, by the bound that dropped them
}
