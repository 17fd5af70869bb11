package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var taskIngestTests = []test{
	{"TaskIngest", testTaskIngest},
	{"TaskIngestRejected", testTaskIngestRejected},
	{"TaskIngestQuota", testTaskIngestQuota},
	{"TaskIngestQuotaNotes", testTaskIngestQuotaNotes},
	{"TaskIngestQuotaConcurrent", func(t *testing.T, st store.Store) {
		IngestUnderQuotaConcurrently(t, []store.Store{st}, 6, 10)
	}},
	{"TaskQueryEvents", testTaskQueryEvents},
	{"TaskBySession", testTaskBySession},
	{"TaskClaimSetup", testTaskClaimSetup},
	{"TaskClaimSetupConcurrent", testTaskClaimSetupConcurrent},
	{"TaskUpdateState", testTaskUpdateState},
	{"TaskReplaceSession", testTaskReplaceSession},
	{"TaskReplaceSessionAfterStop", testTaskReplaceSessionAfterStop},
	{"TaskUsage", testTaskUsage},
}

// guestEvents returns events of type typ with the given guest seqs.
func guestEvents(typ string, seqs ...int64) []domain.TaskEvent {
	out := make([]domain.TaskEvent, len(seqs))
	for i, s := range seqs {
		out[i] = domain.TaskEvent{Type: typ, GuestSeq: s}
	}
	return out
}

func ingest(t *testing.T, st store.Store, taskID domain.TaskID, sessionID domain.SessionID, rewound *int64, events []domain.TaskEvent, wantCursor int64, wantSeqs ...int64) {
	t.Helper()
	res, err := st.IngestTaskEvents(t.Context(), store.TaskIngest{TaskID: taskID, SessionID: sessionID, RewoundTo: rewound, Events: events})
	must(t, err)
	if res.Cursor != wantCursor || len(res.Added) != len(wantSeqs) || len(res.Dropped) != 0 {
		t.Fatalf("ingest: cursor %d, %d events appended, %v dropped; want cursor %d, %d events", res.Cursor, len(res.Added), res.Dropped, wantCursor, len(wantSeqs))
	}
	for i, e := range res.Added {
		if e.Seq != wantSeqs[i] || e.TaskID != taskID {
			t.Fatalf("ingested event %d = %+v, want task seq %d", i, e, wantSeqs[i])
		}
	}
}

func testTaskIngest(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "ingest")
	task := createTask(t, st, p)
	_, err := st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "prompt"}}) // seq 1, not from a guest
	must(t, err)

	ingest(t, st, task.ID, "s1", nil, nil, 0)                                   // read the cursor
	ingest(t, st, task.ID, "s1", nil, guestEvents("text", 1, 2, 3), 3, 2, 3, 4) // all new
	ingest(t, st, task.ID, "s1", nil, guestEvents("text", 2, 3, 4), 4, 5)       // a resend: only 4 is new
	ingest(t, st, task.ID, "s1", nil, guestEvents("text", 1, 2), 4)             // nothing new
	back := int64(2)
	ingest(t, st, task.ID, "s1", &back, nil, 2)                           // rolled back to an older guest state
	ingest(t, st, task.ID, "s1", nil, guestEvents("redo", 3, 4), 4, 6, 7) // taken again: the new state's events
	higher := int64(9)
	ingest(t, st, task.ID, "s1", &higher, nil, 4) // never raised by a rewind

	// A later session has its own cursor; the earlier one keeps its own.
	_, err = st.AttachSession(ctx, task.ID, "s2", t0)
	must(t, err)
	ingest(t, st, task.ID, "s2", nil, guestEvents("text", 1), 1, 8)
	ingest(t, st, task.ID, "s1", nil, nil, 4)
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	if cur.EventSeq != 8 {
		t.Fatalf("task event seq = %d, want 8", cur.EventSeq)
	}
	all, err := st.ListTaskEvents(ctx, task.ID, 0, 0)
	must(t, err)
	if len(all) != 8 || all[5].Type != "redo" {
		t.Fatalf("stored events: %+v", all)
	}
}

func testTaskIngestRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "ingest-bad")
	task := createTask(t, st, p)
	_, err := st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	if _, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: "other", Events: guestEvents("text", 1)}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ingest from a session the task never had: %v, want ErrNotFound", err)
	}
	if _, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: "nope", SessionID: "s1"}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ingest into an unknown task: %v, want ErrNotFound", err)
	}
	for name, evs := range map[string][]domain.TaskEvent{
		"decreasing seqs": guestEvents("text", 2, 1),
		"repeated seq":    guestEvents("text", 1, 1),
		"no type":         guestEvents("", 1),
	} {
		if _, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: "s1", Events: evs}); err == nil {
			t.Fatalf("%s: accepted", name)
		}
	}
	badNote := store.TaskQuota{MaxEvents: 1, Notes: map[string]domain.TaskEvent{store.QuotaEvents: {Type: "error", Payload: json.RawMessage(`{`)}}}
	if _, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: "s1", Events: guestEvents("text", 1, 2), Quota: badNote}); err == nil {
		t.Fatal("a note with a malformed payload: accepted")
	}
	ingest(t, st, task.ID, "s1", nil, nil, 0) // nothing was written
}

func testTaskBySession(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "by-session")
	task := createTask(t, st, p)
	if _, err := st.TaskBySession(ctx, domain.SessionID("s-"+task.ID)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("task of a session no task has: %v", err)
	}
	_, err := st.AttachSession(ctx, task.ID, domain.SessionID("s-"+task.ID), t0)
	must(t, err)
	got, err := st.TaskBySession(ctx, domain.SessionID("s-"+task.ID))
	must(t, err)
	if got.ID != task.ID {
		t.Fatalf("task of the session = %s, want %s", got.ID, task.ID)
	}
	if _, err := st.TaskBySession(ctx, ""); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("task of no session: %v", err)
	}
}

func testTaskClaimSetup(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "claim-setup")
	task := createTask(t, st, p) // starting, updated at t0
	never := time.Time{}
	claim := func(now, stale, held time.Time, want bool) {
		t.Helper()
		got, err := st.ClaimTaskSetup(ctx, task.ID, now, stale, held)
		must(t, err)
		if got != want {
			t.Fatalf("claim at %s (stale before %s, held %s) = %v, want %v", now, stale, held, got, want)
		}
	}
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	claim(m(1), t0.Add(-time.Second), never, false) // updated after staleBefore: not taken
	claim(m(1), t0, never, true)                    // stale: taken, stamped m(1)
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	wantTime(t, "updated_at", cur.UpdatedAt, m(1))
	claim(m(2), never, m(1), true)  // the holder renews with its stamp
	claim(m(3), never, m(1), false) // an old stamp: the claim was lost
	claim(m(9), m(5), never, true)  // taken over after nobody renewed
	claim(m(10), never, m(2), false)
	must(t, st.SetTaskState(ctx, task.ID, domain.TaskRunning, "", m(11)))
	claim(m(60), m(60), m(11), false) // no longer starting
	if ok, err := st.ClaimTaskSetup(ctx, "nope", t0, t0, never); ok || err != nil {
		t.Fatalf("claim of an unknown task = %v, %v", ok, err)
	}
}

func testTaskClaimSetupConcurrent(t *testing.T, st store.Store) {
	p := createProfile(t, st, "claim-race")
	task := createTask(t, st, p)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := st.ClaimTaskSetup(context.Background(), task.ID, t0.Add(time.Hour+time.Duration(i)), t0, time.Time{})
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				won++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Fatalf("%d claimers won a stale setup, want exactly 1", won)
	}
}

func testTaskUpdateState(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "update-state")
	task := createTask(t, st, p)
	live := []domain.TaskState{domain.TaskStarting, domain.TaskRunning, domain.TaskIdle}
	ok, err := st.UpdateTaskState(ctx, task.ID, live, domain.TaskRunning, "", t0.Add(time.Second))
	must(t, err)
	if !ok {
		t.Fatal("starting -> running refused")
	}
	must(t, st.SetTaskState(ctx, task.ID, domain.TaskStopped, "", t0.Add(2*time.Second)))
	ok, err = st.UpdateTaskState(ctx, task.ID, live, domain.TaskIdle, "auth: bad key", t0.Add(3*time.Second))
	must(t, err)
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	if ok || cur.State != domain.TaskStopped || cur.Error != "" {
		t.Fatalf("a stopped task was moved: ok %v, %+v", ok, cur)
	}
	if _, err := st.UpdateTaskState(ctx, "nope", live, domain.TaskIdle, "", t0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of an unknown task: %v", err)
	}
}

// continuable are the task states from which tasks.Transition allows a
// follow-up to continue a task in a new session.
var continuable = []domain.TaskState{domain.TaskRunning, domain.TaskIdle}

func testTaskReplaceSession(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "replace-session")
	task := createTask(t, st, p)
	_, err := st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	must(t, st.SetTaskState(ctx, task.ID, domain.TaskIdle, "auth: x", t0))
	ts, err := st.ReplaceSession(ctx, task.ID, continuable, "s1", "s2", t0.Add(time.Minute))
	must(t, err)
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	if ts.Seq != 2 || ts.SessionID != "s2" || cur.SessionID != "s2" || cur.State != domain.TaskStarting || cur.Error != "" {
		t.Fatalf("after replace: %+v, task %+v", ts, cur)
	}
	if _, err := st.ReplaceSession(ctx, task.ID, []domain.TaskState{domain.TaskStarting}, "s1", "s3", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("replace of a session no longer current: %v, want ErrConflict", err)
	}
	must(t, st.SetTaskState(ctx, task.ID, domain.TaskRunning, "", t0))
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.ReplaceSession(context.Background(), task.ID, continuable, "s2", domain.SessionID(fmt.Sprintf("r%d", i)), t0)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrConflict):
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	ss, err := st.ListTaskSessions(ctx, task.ID)
	must(t, err)
	if won != 1 || len(ss) != 3 {
		t.Fatalf("%d concurrent replacers won, %d sessions recorded; want 1 and 3", won, len(ss))
	}
}

// testTaskReplaceSessionAfterStop: a stop that lands between a follow-up's
// read of the task and its ReplaceSession is never undone: the write is
// refused, the task stays stopped in its session, and nothing is recorded.
func testTaskReplaceSessionAfterStop(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "replace-after-stop")
	for _, state := range []domain.TaskState{domain.TaskStopped, domain.TaskFailed, domain.TaskStarting} {
		task := createTask(t, st, p)
		_, err := st.AttachSession(ctx, task.ID, "s1", t0)
		must(t, err)
		must(t, st.SetTaskState(ctx, task.ID, domain.TaskIdle, "", t0))
		// The follow-up read the task idle; a stop (or a failure) lands now.
		ok, err := st.UpdateTaskState(ctx, task.ID, continuable, state, "why", t0.Add(time.Second))
		must(t, err)
		if !ok {
			t.Fatalf("%s: the state change was refused", state)
		}
		if _, err := st.ReplaceSession(ctx, task.ID, continuable, "s1", "s2", t0.Add(time.Minute)); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("replace in a %s task: %v, want ErrConflict", state, err)
		}
		cur, err := st.GetTask(ctx, task.ID)
		must(t, err)
		if cur.State != state || cur.SessionID != "s1" || cur.Error != "why" {
			t.Fatalf("a refused replace changed the %s task: %+v", state, cur)
		}
		ss, err := st.ListTaskSessions(ctx, task.ID)
		must(t, err)
		if len(ss) != 1 {
			t.Fatalf("a refused replace recorded a session: %+v", ss)
		}
	}
	if _, err := st.ReplaceSession(ctx, "t-none", nil, "s1", "s2", t0); err == nil {
		t.Fatal("a replace with no state to move from was accepted")
	}
}

// sized returns guest events of type "text" with the given guest seqs, each
// of Bytes 17 ("text" and {"x":"aaaaa"}).
func sized(seqs ...int64) []domain.TaskEvent {
	out := guestEvents("text", seqs...)
	for i := range out {
		out[i].Payload = json.RawMessage(`{"x":"aaaaa"}`)
	}
	return out
}

// wantTally checks a task's EventSeq, and its EventBytes against the
// events it stores.
func wantTally(t *testing.T, st store.Store, taskID domain.TaskID, wantSeq int64) {
	t.Helper()
	cur, err := st.GetTask(t.Context(), taskID)
	must(t, err)
	all, err := st.ListTaskEvents(t.Context(), taskID, 0, 0)
	must(t, err)
	var bytes int64
	for _, e := range all {
		bytes += e.Bytes()
	}
	if cur.EventSeq != wantSeq || int64(len(all)) != wantSeq || cur.EventBytes != bytes {
		t.Fatalf("task has event_seq %d, %d events, event_bytes %d; want %d events of %d bytes", cur.EventSeq, len(all), cur.EventBytes, wantSeq, bytes)
	}
}

func testTaskIngestQuota(t *testing.T, st store.Store) {
	prompt := domain.TaskEvent{Type: "prompt", Payload: json.RawMessage(`{"text":"go"}`)} // 19 bytes
	tests := []struct {
		name        string
		quota       store.TaskQuota
		before      []domain.TaskEvent // ingested first, without a quota
		events      []domain.TaskEvent
		wantAdded   int
		wantDropped map[string]int
		wantCursor  int64
	}{
		{"no quota", store.TaskQuota{}, nil, sized(1, 2, 3, 4, 5), 5, nil, 5},
		{"events: the task's count stops the guest", store.TaskQuota{MaxEvents: 4}, nil, sized(1, 2, 3, 4, 5), 3, map[string]int{store.QuotaEvents: 2}, 5},
		{"events: a full task takes none, and acknowledges them", store.TaskQuota{MaxEvents: 1}, nil, sized(1, 2, 3), 0, map[string]int{store.QuotaEvents: 3}, 3},
		{"bytes: the task's size stops the guest", store.TaskQuota{MaxBytes: 19 + 2*17 + 16}, nil, sized(1, 2, 3, 4), 2, map[string]int{store.QuotaBytes: 2}, 4},
		{"bytes: an event that does not fit drops the later ones too", store.TaskQuota{MaxBytes: 19 + 17 + 40},
			nil, append(sized(1), domain.TaskEvent{Type: "text", Payload: json.RawMessage(`{"x":"` + strings.Repeat("b", 60) + `"}`), GuestSeq: 2}, sized(3)[0]),
			1, map[string]int{store.QuotaBytes: 2}, 3},
		{"rate: Admit bounds the fresh events", store.TaskQuota{Admit: ptr(2)}, nil, sized(1, 2, 3, 4, 5), 2, map[string]int{store.QuotaRate: 3}, 5},
		{"rate: Admit 0 takes none", store.TaskQuota{Admit: ptr(0)}, nil, sized(1, 2), 0, map[string]int{store.QuotaRate: 2}, 2},
		{"rate: a negative Admit takes none", store.TaskQuota{Admit: ptr(-3)}, nil, sized(1, 2), 0, map[string]int{store.QuotaRate: 2}, 2},
		{"events first, then the rate", store.TaskQuota{MaxEvents: 4, Admit: ptr(2)}, nil, sized(1, 2, 3, 4, 5), 2,
			map[string]int{store.QuotaEvents: 2, store.QuotaRate: 1}, 5},
		{"resent events count toward no bound", store.TaskQuota{MaxEvents: 6, Admit: ptr(2)}, sized(1, 2, 3), sized(1, 2, 3, 4, 5), 2, nil, 5},
		{"a rewind-free resend of nothing new", store.TaskQuota{Admit: ptr(0)}, sized(1, 2), sized(1, 2), 0, nil, 2},
	}
	p := createProfile(t, st, "quota")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			task := createTask(t, st, p)
			_, err := st.AttachSession(ctx, task.ID, "s1", t0)
			must(t, err)
			_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{prompt})
			must(t, err)
			var last int64
			if tt.before != nil {
				var seqs []int64
				for i := range tt.before {
					seqs = append(seqs, int64(2+i))
				}
				last = tt.before[len(tt.before)-1].GuestSeq
				ingest(t, st, task.ID, "s1", nil, tt.before, last, seqs...)
			}
			res, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: "s1", Events: tt.events, Quota: tt.quota})
			must(t, err)
			if len(res.Added) != tt.wantAdded || fmt.Sprint(res.Dropped) != fmt.Sprint(tt.wantDropped) || res.Cursor != tt.wantCursor {
				t.Fatalf("added %d, dropped %v, cursor %d; want %d, %v, %d", len(res.Added), res.Dropped, res.Cursor, tt.wantAdded, tt.wantDropped, tt.wantCursor)
			}
			var fresh []domain.TaskEvent
			for _, e := range tt.events {
				if e.GuestSeq > last {
					fresh = append(fresh, e)
				}
			}
			for i, e := range res.Added { // the first fresh events, in order
				if e.GuestSeq != fresh[i].GuestSeq || e.Seq != int64(2+len(tt.before)+i) {
					t.Fatalf("added event %d = guest seq %d, seq %d; want guest seq %d", i, e.GuestSeq, e.Seq, fresh[i].GuestSeq)
				}
			}
			wantTally(t, st, task.ID, int64(1+len(tt.before)+tt.wantAdded))
			ingest(t, st, task.ID, "s1", nil, nil, tt.wantCursor) // dropped events stay acknowledged
			// The coordinator's own events are never refused.
			_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{prompt})
			must(t, err)
			wantTally(t, st, task.ID, int64(2+len(tt.before)+tt.wantAdded))
		})
	}
}

// quotaNotes are notes for every kind, their payload naming it.
func quotaNotes() map[string]domain.TaskEvent {
	out := map[string]domain.TaskEvent{}
	for _, k := range []string{store.QuotaEvents, store.QuotaBytes, store.QuotaRate} {
		out[k] = domain.TaskEvent{Type: "error", Payload: json.RawMessage(`{"quota":"` + k + `"}`)}
	}
	return out
}

// ingestNotes ingests events under q and checks the notes appended (the
// quota each names, in order) and what was dropped.
func ingestNotes(t *testing.T, st store.Store, taskID domain.TaskID, q store.TaskQuota, events []domain.TaskEvent, wantNotes []string, wantDropped map[string]int) {
	t.Helper()
	res, err := st.IngestTaskEvents(t.Context(), store.TaskIngest{TaskID: taskID, SessionID: "s1", Events: events, Quota: q})
	must(t, err)
	var notes []string
	for _, e := range res.Added {
		if e.Type == "error" {
			var p struct{ Quota string }
			must(t, json.Unmarshal(e.Payload, &p))
			notes = append(notes, p.Quota)
			if e.GuestSeq != 0 {
				t.Fatalf("a note has guest seq %d", e.GuestSeq)
			}
		}
	}
	if fmt.Sprint(notes) != fmt.Sprint(wantNotes) || fmt.Sprint(res.Dropped) != fmt.Sprint(wantDropped) {
		t.Fatalf("notes %v, dropped %v; want %v, %v", notes, res.Dropped, wantNotes, wantDropped)
	}
}

func testTaskIngestQuotaNotes(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "notes")
	newTask := func() domain.TaskID {
		task := createTask(t, st, p)
		_, err := st.AttachSession(ctx, task.ID, "s1", t0)
		must(t, err)
		return task.ID
	}
	notes := quotaNotes()

	// The events quota is noted once per task; the note is appended past it.
	id := newTask()
	q := store.TaskQuota{MaxEvents: 3, Notes: notes}
	ingestNotes(t, st, id, q, sized(1, 2, 3, 4, 5), []string{store.QuotaEvents}, map[string]int{store.QuotaEvents: 2})
	ingestNotes(t, st, id, q, sized(6, 7), nil, map[string]int{store.QuotaEvents: 2})
	wantTally(t, st, id, 4)

	// So is the bytes quota, even when a larger quota let events in since.
	id = newTask()
	ingestNotes(t, st, id, store.TaskQuota{MaxBytes: 17, Notes: notes}, sized(1, 2), []string{store.QuotaBytes}, map[string]int{store.QuotaBytes: 1})
	ingestNotes(t, st, id, store.TaskQuota{MaxBytes: 1 << 20, Notes: notes}, sized(3), nil, nil)
	cur, err := st.GetTask(ctx, id)
	must(t, err)
	ingestNotes(t, st, id, store.TaskQuota{MaxBytes: cur.EventBytes, Notes: notes}, sized(4), nil, map[string]int{store.QuotaBytes: 1})

	// A rate note comes with every call that drops over the rate.
	id = newTask()
	q = store.TaskQuota{Admit: ptr(1), Notes: notes}
	ingestNotes(t, st, id, q, sized(1, 2), []string{store.QuotaRate}, map[string]int{store.QuotaRate: 1})
	ingestNotes(t, st, id, q, sized(3, 4), []string{store.QuotaRate}, map[string]int{store.QuotaRate: 1})
	ingestNotes(t, st, id, q, sized(5), nil, nil)
	ingestNotes(t, st, id, store.TaskQuota{Admit: ptr(0)}, sized(6), nil, map[string]int{store.QuotaRate: 1}) // none given
	wantTally(t, st, id, 5)

	// A bound that drops without a note given is noted when one is.
	id = newTask()
	ingestNotes(t, st, id, store.TaskQuota{MaxEvents: 1}, sized(1, 2), nil, map[string]int{store.QuotaEvents: 1})
	ingestNotes(t, st, id, store.TaskQuota{MaxEvents: 1, Notes: notes}, sized(3), []string{store.QuotaEvents}, map[string]int{store.QuotaEvents: 1})

	// Both bounds in one call: the one that stops the guest is noted.
	id = newTask()
	ingestNotes(t, st, id, store.TaskQuota{MaxEvents: 2, MaxBytes: 17, Notes: notes}, sized(1, 2, 3), []string{store.QuotaBytes}, map[string]int{store.QuotaBytes: 2})
	ingestNotes(t, st, id, store.TaskQuota{MaxEvents: 2, Notes: notes}, sized(4), []string{store.QuotaEvents}, map[string]int{store.QuotaEvents: 1})
}

// IngestUnderQuotaConcurrently has workers on stores (replicas) ingest,
// one event a call, each from its own session of one task under a quota of
// half the events. The task must end with exactly the quota's events and
// one note, every session's cursor past all its events.
func IngestUnderQuotaConcurrently(t *testing.T, stores []store.Store, workers, each int) {
	t.Helper()
	ctx := t.Context()
	task := createTask(t, stores[0], createProfile(t, stores[0], "flood"))
	for w := range workers {
		_, err := stores[0].AttachSession(ctx, task.ID, domain.SessionID(fmt.Sprintf("s%d", w)), t0)
		must(t, err)
	}
	q := store.TaskQuota{MaxEvents: int64(workers * each / 2), Notes: quotaNotes()}
	var mu sync.Mutex
	dropped := 0
	var wg sync.WaitGroup
	for w := range workers {
		st := stores[w%len(stores)]
		wg.Go(func() {
			for i := range each {
				res, err := st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: domain.SessionID(fmt.Sprintf("s%d", w)),
					Events: sized(int64(i + 1)), Quota: q})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				dropped += res.Dropped[store.QuotaEvents]
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	wantTally(t, stores[0], task.ID, q.MaxEvents+1)
	if dropped != workers*each-int(q.MaxEvents) {
		t.Fatalf("%d events dropped, want %d", dropped, workers*each-int(q.MaxEvents))
	}
	for w := range workers {
		res, err := stores[len(stores)-1].IngestTaskEvents(ctx, store.TaskIngest{TaskID: task.ID, SessionID: domain.SessionID(fmt.Sprintf("s%d", w))})
		must(t, err)
		if res.Cursor != int64(each) {
			t.Fatalf("session s%d cursor %d, want %d", w, res.Cursor, each)
		}
	}
}

func testTaskQueryEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	task := createTask(t, st, createProfile(t, st, "query"))
	var evs []domain.TaskEvent
	for _, typ := range []string{"session", "prompt", "text", "repo_cloned", "session", "text", "prompt"} {
		evs = append(evs, domain.TaskEvent{Type: typ, Payload: json.RawMessage(`{}`)})
	}
	_, err := st.AppendTaskEvents(ctx, task.ID, evs)
	must(t, err)
	tests := []struct {
		name string
		q    store.TaskEventQuery
		want []int64
	}{
		{"every event", store.TaskEventQuery{Limit: 10}, []int64{1, 2, 3, 4, 5, 6, 7}},
		{"a page", store.TaskEventQuery{Limit: 2}, []int64{1, 2}},
		{"after", store.TaskEventQuery{AfterSeq: 5, Limit: 10}, []int64{6, 7}},
		{"between", store.TaskEventQuery{AfterSeq: 2, BeforeSeq: 6, Limit: 10}, []int64{3, 4, 5}},
		{"one type", store.TaskEventQuery{Types: []string{"session"}, Limit: 10}, []int64{1, 5}},
		{"the newest of a type", store.TaskEventQuery{Types: []string{"session"}, Newest: true, Limit: 1}, []int64{5}},
		{"two types, newest first, before", store.TaskEventQuery{Types: []string{"prompt", "text"}, BeforeSeq: 7, Newest: true, Limit: 2}, []int64{6, 3}},
		{"a type it lacks", store.TaskEventQuery{Types: []string{"stopped"}, Limit: 10}, nil},
		{"the largest page", store.TaskEventQuery{Limit: store.MaxTaskEventPage}, []int64{1, 2, 3, 4, 5, 6, 7}},
	}
	for _, tt := range tests {
		got, err := st.QueryTaskEvents(ctx, task.ID, tt.q)
		must(t, err)
		var seqs []int64
		for _, e := range got {
			seqs = append(seqs, e.Seq)
			if e.TaskID != task.ID || e.Type != evs[e.Seq-1].Type {
				t.Fatalf("%s: event %+v", tt.name, e)
			}
		}
		if fmt.Sprint(seqs) != fmt.Sprint(tt.want) {
			t.Errorf("%s: seqs %v, want %v", tt.name, seqs, tt.want)
		}
	}
	if got, err := st.QueryTaskEvents(ctx, domain.TaskID(newID()), store.TaskEventQuery{Limit: 5}); err != nil || len(got) != 0 {
		t.Fatalf("events of an unknown task: %+v, %v", got, err)
	}
	for name, q := range map[string]store.TaskEventQuery{
		"no limit":       {},
		"a page too big": {Limit: store.MaxTaskEventPage + 1},
		"too many types": {Types: strings.Split("a,b,c,d,e,f,g,h,i", ","), Limit: 1},
	} {
		if _, err := st.QueryTaskEvents(ctx, task.ID, q); !errors.Is(err, domain.ErrInvalid) {
			t.Errorf("%s: %v, want domain.ErrInvalid", name, err)
		}
	}
}

// usageEvent is a usage event at guest seq seq carrying u.
func usageEvent(seq int64, u domain.TurnUsage) domain.TaskEvent {
	return domain.TaskEvent{Type: "usage", Payload: []byte(`{"turn":"t1"}`), GuestSeq: seq, Usage: &u}
}

// testTaskUsage: a task sums the usage its events carry exactly when they
// are stored (a resend adds nothing), priced ones in the currency of the
// first, the rest counted as not priced; the run that started it is kept.
func testTaskUsage(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "usage")
	task := newTask(p)
	task.RunID, task.StartedBy = "run-7", "ci-token"
	got, err := st.CreateTask(ctx, task)
	must(t, err)
	if got.RunID != "run-7" || got.StartedBy != "ci-token" || got.Usage != (domain.TaskUsage{}) {
		t.Fatalf("created task: run %q, started by %q, usage %+v", got.RunID, got.StartedBy, got.Usage)
	}
	_, err = st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	usd := func(m int64) domain.Money { return domain.Money{Micros: m, Currency: "USD"} }
	sonnet := domain.TurnUsage{Model: "claude-sonnet-4-5", Tokens: domain.Tokens{Input: 2300, Output: 200, CacheRead: 2000, CacheWrite: 100},
		Cost: usd(4575), PriceTable: "engrams-2025-10"}
	first := []domain.TaskEvent{
		usageEvent(1, sonnet),
		{Type: "assistant_text", Payload: []byte(`{"text":"hi"}`), GuestSeq: 2},
		usageEvent(3, domain.TurnUsage{Model: "mystery", Tokens: domain.Tokens{Input: 10, Output: 1}}), // not priced
		usageEvent(4, domain.TurnUsage{}),                                                              // nothing used: not counted
	}
	ingest(t, st, task.ID, "s1", nil, first, 4, 1, 2, 3, 4)
	ingest(t, st, task.ID, "s1", nil, first, 4) // a resend
	_, err = st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{
		usageEvent(0, domain.TurnUsage{Tokens: domain.Tokens{Output: 5}, Cost: domain.Money{Micros: 9, Currency: "EUR"}}), // another currency
		usageEvent(0, domain.TurnUsage{Model: "claude-haiku-4-5", Tokens: domain.Tokens{Input: 1}, Cost: usd(1_000_001)}),
	})
	must(t, err)
	want := domain.TaskUsage{Model: "claude-haiku-4-5", Tokens: domain.Tokens{Input: 2311, Output: 206, CacheRead: 2000, CacheWrite: 100},
		Cost: usd(1_004_576), Unpriced: 2}
	got, err = st.GetTask(ctx, task.ID)
	must(t, err)
	if got.Usage != want || got.RunID != "run-7" {
		t.Fatalf("task usage %+v, run %q; want %+v, run-7", got.Usage, got.RunID, want)
	}
	list, err := st.ListTasks(ctx, domain.TaskFilter{ProfileID: p.ID})
	must(t, err)
	if len(list) != 1 || list[0].Usage != want {
		t.Fatalf("listed: %+v", list)
	}
}
