package tasks

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// Quotas bound what a task takes from its sessions' guests (the guest is
// not trusted: root, maybe prompt-injected). Zero fields take the
// defaults; a negative field is no bound. Only the guest's events are ever
// dropped: the coordinator's own events (prompts, session moves, clones,
// stops, these quotas' notes) are always appended, and count toward
// MaxEvents and MaxBytes like every event of the task, so a full task still
// takes every prompt a user sends (its agent's answers are what it drops).
// Over a quota the excess is dropped and acknowledged to the host (the
// cursor moves past it, so it is not sent again), the task gets one error
// event of kind "quota" saying so, and the refusal is counted
// (Metrics.QuotaRefused).
type Quotas struct {
	// MaxEventBytes bounds one guest event: its type, turn and data
	// together as the guest sent them, and its type and payload as stored
	// (the turn merged into the data). Default 256 KiB: as large as a
	// prompt may be (the largest event a user writes), which keeps a page
	// of the conversation (taskEventPage events) under 25 MiB. A larger
	// event is stored as a note of its size, in its place.
	MaxEventBytes int
	// MaxEvents bounds a task's events (its EventSeq, every kind counted).
	// Default 100,000: an agent at work writes a few thousand an hour, so
	// this is days of work, and a catch-up of all of it stays a thousand
	// pages. Noted once per task.
	MaxEvents int64
	// MaxBytes bounds the bytes of a task's events (its EventBytes: type
	// and payload of each, every kind counted). Default 256 MiB: a
	// thousand events of the largest size; it bounds what the database
	// keeps and what a reader of the whole conversation moves. Noted once
	// per task.
	MaxBytes int64
	// Rate (events a second) and Burst bound how fast a task takes its
	// guest's events: a token bucket per task on this replica (a host posts
	// a session's events to the replica holding its link), on the injected
	// clock. Default 200/s with a burst of 2,000: ten times what a harness
	// writes at its busiest, and two full batches for a relay catching up
	// after its link was down. Noted at most once per NoteEvery.
	Rate  float64
	Burst int
	// MaxRewinds bounds how often a session's guest may lower its task's
	// cursor (a post with rewound_to: its log is shorter than what the task
	// took) in RewindWindow. Default 10 in an hour: a guest rewinds once
	// when it is restored from an older snapshot; one rewinding in a loop
	// would replay its log into the conversation again and again. A rewind
	// over the bound is ignored: what the guest repeats is dropped as
	// already taken. The coordinator's own rewinds (Rewinder) never count.
	// Noted at most once per NoteEvery.
	MaxRewinds   int
	RewindWindow time.Duration
	// NoteEvery spaces the notes of the rate and rewind quotas, per task
	// and kind on this replica. Default 1h: a guest flooding for a day
	// leaves 24 notes, not millions.
	NoteEvery time.Duration
}

// Defaults of Quotas (see there why).
const (
	defaultMaxEventBytes = 256 << 10
	defaultMaxEvents     = 100_000
	defaultMaxBytes      = 256 << 20
	defaultRate          = 200
	defaultBurst         = 2000
	defaultMaxRewinds    = 10
	defaultRewindWindow  = time.Hour
	defaultNoteEvery     = time.Hour
)

// withDefaults fills the zero fields.
func (q Quotas) withDefaults() Quotas {
	def := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&q.MaxEvents, defaultMaxEvents)
	def(&q.MaxBytes, defaultMaxBytes)
	for _, f := range []struct {
		v *int
		d int
	}{{&q.MaxEventBytes, defaultMaxEventBytes}, {&q.Burst, defaultBurst}, {&q.MaxRewinds, defaultMaxRewinds}} {
		if *f.v == 0 {
			*f.v = f.d
		}
	}
	if q.Rate == 0 {
		q.Rate = defaultRate
	}
	if q.RewindWindow <= 0 {
		q.RewindWindow = defaultRewindWindow
	}
	if q.NoteEvery <= 0 {
		q.NoteEvery = defaultNoteEvery
	}
	return q
}

// Quota kinds of the tasks' own bounds; the store names the others
// (store.QuotaEvents, store.QuotaBytes, store.QuotaRate). They label the
// notes and Metrics.QuotaRefused.
const (
	QuotaEventSize = "event_size"
	QuotaRewinds   = "rewinds"
)

// QuotaErrorKind is the kind of the error event a task gets over a quota.
const QuotaErrorKind = "quota"

// Metrics records what the task service refuses (metrics.Registry does).
type Metrics interface {
	// QuotaRefused counts one guest event (or rewind) dropped over a quota.
	QuotaRefused(quota string)
}

type noMetrics struct{}

func (noMetrics) QuotaRefused(string) {}

// quotaNote is the error event telling a task what a quota dropped.
func quotaNote(kind, message string) domain.TaskEvent {
	return taskEvent("error", map[string]any{"kind": QuotaErrorKind, "quota": kind, "message": message})
}

// storeQuota is what the store enforces for one ingest: the task's
// events and bytes, and admit fresh events (nil: no rate bound), with the
// notes of each bound; the rate's only when rateNote.
func (q Quotas) storeQuota(admit *int, rateNote bool) store.TaskQuota {
	out := store.TaskQuota{MaxEvents: max(q.MaxEvents, 0), MaxBytes: max(q.MaxBytes, 0), Admit: admit, Notes: map[string]domain.TaskEvent{
		store.QuotaEvents: quotaNote(store.QuotaEvents, fmt.Sprintf("the task reached its quota of %d events: "+
			"the events its session sends from now on are dropped (your prompts are still taken)", q.MaxEvents)),
		store.QuotaBytes: quotaNote(store.QuotaBytes, fmt.Sprintf("the task's events reached their quota of %s: "+
			"the events its session sends from now on are dropped (your prompts are still taken)", domain.SizeText(q.MaxBytes))),
	}}
	if rateNote {
		out.Notes[store.QuotaRate] = quotaNote(store.QuotaRate, fmt.Sprintf("the session sent events faster than "+
			"%g a second (bursts of %d): the events over that rate are dropped (noted at most once every %s)", q.Rate, q.Burst, q.NoteEvery))
	}
	return out
}

// rewindNote is the note of a refused rewind.
func (q Quotas) rewindNote() domain.TaskEvent {
	return quotaNote(QuotaRewinds, fmt.Sprintf("the session rewound its event log more than %d times in %s: "+
		"further rewinds are ignored and the events it repeats dropped (noted at most once every %s)", q.MaxRewinds, q.RewindWindow, q.NoteEvery))
}

// quotaGuard keeps, in memory on this replica, the state of the quotas
// that are about time: each task's token bucket, its sessions' recent
// rewinds and when it last had each note. A task idle longer than the
// longest window is forgotten (its bucket is full again by then), so the
// map holds only the tasks active lately.
type quotaGuard struct {
	q Quotas

	mu    sync.Mutex
	tasks map[domain.TaskID]*taskQuotaState
	swept time.Time
}

type taskQuotaState struct {
	tokens  float64
	at      time.Time // when tokens was measured
	rewinds map[domain.SessionID][]time.Time
	noted   map[string]time.Time
	seen    time.Time
}

func newQuotaGuard(q Quotas) *quotaGuard {
	return &quotaGuard{q: q, tasks: map[domain.TaskID]*taskQuotaState{}}
}

// stateLocked is the task's state, its bucket refilled to now.
func (g *quotaGuard) stateLocked(id domain.TaskID, now time.Time) *taskQuotaState {
	if now.Sub(g.swept) > time.Minute {
		g.swept = now
		idle := max(g.q.RewindWindow, g.q.NoteEvery, time.Duration(float64(g.q.Burst)/max(g.q.Rate, 1e-9)*float64(time.Second)))
		for k, s := range g.tasks {
			if now.Sub(s.seen) > idle {
				delete(g.tasks, k)
			}
		}
	}
	s := g.tasks[id]
	if s == nil {
		s = &taskQuotaState{tokens: float64(g.q.Burst), at: now, rewinds: map[domain.SessionID][]time.Time{}, noted: map[string]time.Time{}}
		g.tasks[id] = s
	}
	if d := now.Sub(s.at); d > 0 {
		s.tokens = min(float64(g.q.Burst), s.tokens+g.q.Rate*d.Seconds())
		s.at = now
	}
	s.seen = now
	return s
}

// admit is how many fresh events the task may take now (nil: no rate
// bound).
func (g *quotaGuard) admit(id domain.TaskID, now time.Time) *int {
	if g.q.Rate < 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	n := int(math.Floor(max(g.stateLocked(id, now).tokens, 0)))
	return &n
}

// took spends the tokens of n events the task took (concurrent posts may
// leave it in debt, down to one burst: later events wait for it).
func (g *quotaGuard) took(id domain.TaskID, n int, now time.Time) {
	if g.q.Rate < 0 || n == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stateLocked(id, now)
	s.tokens = max(s.tokens-float64(n), -float64(g.q.Burst))
}

// rewind reports whether a session's guest may rewind now, and records it
// if so.
func (g *quotaGuard) rewind(id domain.TaskID, sid domain.SessionID, now time.Time) bool {
	if g.q.MaxRewinds < 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stateLocked(id, now)
	recent := s.rewinds[sid][:0]
	for _, at := range s.rewinds[sid] {
		if now.Sub(at) < g.q.RewindWindow {
			recent = append(recent, at)
		}
	}
	ok := len(recent) < g.q.MaxRewinds
	if ok {
		recent = append(recent, now)
	}
	s.rewinds[sid] = recent
	return ok
}

// noteDue reports whether the task may get a note of kind now; mark
// records that it got one.
func (g *quotaGuard) noteDue(id domain.TaskID, kind string, now time.Time, mark bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stateLocked(id, now)
	last, ok := s.noted[kind]
	due := !ok || now.Sub(last) >= g.q.NoteEvery
	if due && mark {
		s.noted[kind] = now
	}
	return due
}
