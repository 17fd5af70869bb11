package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var taskIngestTests = []test{
	{"TaskIngest", testTaskIngest},
	{"TaskIngestRejected", testTaskIngestRejected},
	{"TaskBySession", testTaskBySession},
	{"TaskClaimSetup", testTaskClaimSetup},
	{"TaskClaimSetupConcurrent", testTaskClaimSetupConcurrent},
	{"TaskUpdateState", testTaskUpdateState},
	{"TaskReplaceSession", testTaskReplaceSession},
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
	cursor, got, err := st.IngestTaskEvents(t.Context(), taskID, sessionID, rewound, events)
	must(t, err)
	if cursor != wantCursor || len(got) != len(wantSeqs) {
		t.Fatalf("ingest: cursor %d, %d events appended; want cursor %d, %d events", cursor, len(got), wantCursor, len(wantSeqs))
	}
	for i, e := range got {
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
	if _, _, err := st.IngestTaskEvents(ctx, task.ID, "other", nil, guestEvents("text", 1)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ingest from a session the task never had: %v, want ErrNotFound", err)
	}
	if _, _, err := st.IngestTaskEvents(ctx, "nope", "s1", nil, nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ingest into an unknown task: %v, want ErrNotFound", err)
	}
	for name, evs := range map[string][]domain.TaskEvent{
		"decreasing seqs": guestEvents("text", 2, 1),
		"repeated seq":    guestEvents("text", 1, 1),
		"no type":         guestEvents("", 1),
	} {
		if _, _, err := st.IngestTaskEvents(ctx, task.ID, "s1", nil, evs); err == nil {
			t.Fatalf("%s: accepted", name)
		}
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

func testTaskReplaceSession(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "replace-session")
	task := createTask(t, st, p)
	_, err := st.AttachSession(ctx, task.ID, "s1", t0)
	must(t, err)
	must(t, st.SetTaskState(ctx, task.ID, domain.TaskIdle, "auth: x", t0))
	ts, err := st.ReplaceSession(ctx, task.ID, "s1", "s2", t0.Add(time.Minute))
	must(t, err)
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	if ts.Seq != 2 || ts.SessionID != "s2" || cur.SessionID != "s2" || cur.State != domain.TaskStarting || cur.Error != "" {
		t.Fatalf("after replace: %+v, task %+v", ts, cur)
	}
	if _, err := st.ReplaceSession(ctx, task.ID, "s1", "s3", t0); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("replace of a session no longer current: %v, want ErrConflict", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.ReplaceSession(context.Background(), task.ID, "s2", domain.SessionID(fmt.Sprintf("r%d", i)), t0)
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
