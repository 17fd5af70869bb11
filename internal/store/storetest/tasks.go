package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var taskTests = []test{
	{"TaskRoundTrip", testTaskRoundTrip},
	{"TaskRejected", testTaskRejected},
	{"TaskList", testTaskList},
	{"TaskListPages", testTaskListPages},
	{"TaskState", testTaskState},
	{"TaskSessions", testTaskSessions},
	{"TaskSessionsConcurrent", testTaskSessionsConcurrent},
	{"TaskEvents", testTaskEvents},
	{"TaskEventsRejected", testTaskEventsRejected},
	{"TaskEventsConcurrent", func(t *testing.T, st store.Store) {
		AppendTaskEventsConcurrently(t, []store.Store{st}, 8, 20)
	}},
}

const receipt = `{"image":"debian","harness":"claude-code@1.0.0","hosts":["api.anthropic.com"],` +
	`"credentials":[{"name":"anthropic","delivery":"gateway"}]}`

func newTask(profile domain.Profile) domain.Task {
	return domain.Task{
		ID: domain.TaskID(newID()), ProfileID: profile.ID, ProfileVersion: profile.Version, Receipt: json.RawMessage(receipt),
		Title: "create hello.txt", CreatedAt: t0,
	}
}

func createTask(t *testing.T, st store.Store, profile domain.Profile) domain.Task {
	t.Helper()
	task := newTask(profile)
	got, err := st.CreateTask(t.Context(), task)
	must(t, err)
	task.State, task.UpdatedAt = domain.TaskStarting, task.CreatedAt
	wantTask(t, got, task)
	return got
}

func wantTask(t *testing.T, got, want domain.Task) {
	t.Helper()
	if got.ID != want.ID || got.ProfileID != want.ProfileID || got.ProfileVersion != want.ProfileVersion ||
		got.Title != want.Title || got.State != want.State || got.SessionID != want.SessionID ||
		got.EventSeq != want.EventSeq || got.EventBytes != want.EventBytes || got.Error != want.Error ||
		got.RunID != want.RunID || got.StartedBy != want.StartedBy || got.Usage != want.Usage || got.Owner != want.Owner {
		t.Fatalf("task = %+v, want %+v", got, want)
	}
	wantJSON(t, "receipt", got.Receipt, want.Receipt)
	wantTime(t, "created_at", got.CreatedAt, want.CreatedAt)
	wantTime(t, "updated_at", got.UpdatedAt, want.UpdatedAt)
}

func testTaskRoundTrip(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	a := createTask(t, st, p)
	got, err := st.GetTask(ctx, a.ID)
	must(t, err)
	wantTask(t, got, a)
	sessions, err := st.ListTaskSessions(ctx, a.ID)
	must(t, err)
	if len(sessions) != 0 {
		t.Fatalf("sessions of a task created without one = %+v", sessions)
	}

	// Created with a session (attached as the first), another state and an
	// event seq that is ignored.
	b := newTask(p)
	b.State, b.SessionID, b.EventSeq, b.Receipt, b.Title = domain.TaskRunning, "sess-1", 42, nil, ""
	got, err = st.CreateTask(ctx, b)
	must(t, err)
	b.EventSeq, b.UpdatedAt = 0, b.CreatedAt
	wantTask(t, got, b)
	got, err = st.GetTask(ctx, b.ID)
	must(t, err)
	wantTask(t, got, b)
	sessions, err = st.ListTaskSessions(ctx, b.ID)
	must(t, err)
	if len(sessions) != 1 || sessions[0].Seq != 1 || sessions[0].SessionID != "sess-1" || sessions[0].TaskID != b.ID {
		t.Fatalf("sessions of a task created with one = %+v", sessions)
	}
	wantTime(t, "task session created_at", sessions[0].CreatedAt, t0)

	// A deleted profile is accepted: the receipt is what the task runs by.
	must(t, st.DeleteProfile(ctx, p.ID, t0))
	createTask(t, st, p)
	_, err = st.GetTask(ctx, domain.TaskID(newID()))
	wantErr(t, err, store.ErrNotFound)
}

func testTaskRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	a := createTask(t, st, p)
	reused := newTask(p)
	reused.ID, reused.SessionID = a.ID, "sess-x"
	with := func(f func(*domain.Task)) domain.Task {
		task := newTask(p)
		f(&task)
		return task
	}
	cases := []struct {
		name string
		task domain.Task
		want error // nil: any error
	}{
		{"reused id", reused, store.ErrConflict},
		{"unknown profile", with(func(t *domain.Task) { t.ProfileID = newProfileID() }), store.ErrNotFound},
		{"no id", with(func(t *domain.Task) { t.ID = "" }), nil},
		{"no profile", with(func(t *domain.Task) { t.ProfileID = "" }), nil},
		{"bad state", with(func(t *domain.Task) { t.State = "paused" }), nil},
		{"bad receipt", with(func(t *domain.Task) { t.Receipt = json.RawMessage(`{"image"`) }), nil},
	}
	for _, c := range cases {
		_, err := st.CreateTask(ctx, c.task)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: CreateTask error = %v, want %v", c.name, err, c.want)
		}
	}
	list, err := st.ListTasks(ctx, domain.TaskFilter{})
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("listed %d tasks after refused creates, want 1: %+v", len(list), list)
	}
	wantTask(t, list[0], a)
	sessions, err := st.ListTaskSessions(ctx, a.ID)
	must(t, err)
	if len(sessions) != 0 {
		t.Fatalf("a refused create with a reused id attached %+v", sessions)
	}
}

func testTaskList(t *testing.T, st store.Store) {
	ctx := t.Context()
	p1, p2 := createProfile(t, st, "go"), createProfile(t, st, "python")
	ids := map[domain.TaskID]string{}
	for i, c := range []struct {
		key     string
		profile domain.Profile
		state   domain.TaskState
	}{
		{"a", p1, domain.TaskRunning}, {"b", p2, domain.TaskIdle}, {"c", p1, domain.TaskIdle}, {"d", p1, domain.TaskFailed},
	} {
		task := newTask(c.profile)
		task.State = c.state
		task.CreatedAt = t0.Add(time.Duration(4-i) * time.Minute) // listed newest last: d c b a
		_, err := st.CreateTask(ctx, task)
		must(t, err)
		ids[task.ID] = c.key
	}
	cases := []struct {
		f    domain.TaskFilter
		want string
	}{
		{domain.TaskFilter{}, "dcba"},
		{domain.TaskFilter{ProfileID: p1.ID}, "dca"},
		{domain.TaskFilter{States: []domain.TaskState{domain.TaskIdle}}, "cb"},
		{domain.TaskFilter{States: []domain.TaskState{domain.TaskIdle, domain.TaskRunning}}, "cba"},
		{domain.TaskFilter{ProfileID: p1.ID, States: []domain.TaskState{domain.TaskIdle, domain.TaskFailed}}, "dc"},
		{domain.TaskFilter{ProfileID: p2.ID, States: []domain.TaskState{domain.TaskFailed}}, ""},
		{domain.TaskFilter{ProfileID: newProfileID()}, ""},
	}
	for _, c := range cases {
		list, err := st.ListTasks(ctx, c.f)
		must(t, err)
		var got string
		for _, task := range list {
			got += ids[task.ID]
		}
		if got != c.want {
			t.Errorf("ListTasks(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}

func testTaskState(t *testing.T, st store.Store) {
	ctx := t.Context()
	task := createTask(t, st, createProfile(t, st, "go"))
	steps := []struct {
		state  domain.TaskState
		errMsg string
	}{
		{domain.TaskRunning, ""},
		{domain.TaskFailed, "auth failed: 401 from the provider"},
		{domain.TaskIdle, ""}, // clears the error
		{domain.TaskStopped, ""},
		{domain.TaskRunning, ""}, // not fenced: any state may follow
	}
	for i, s := range steps {
		at := t0.Add(time.Duration(i+1) * time.Second)
		must(t, st.SetTaskState(ctx, task.ID, s.state, s.errMsg, at))
		got, err := st.GetTask(ctx, task.ID)
		must(t, err)
		task.State, task.Error, task.UpdatedAt = s.state, s.errMsg, at
		wantTask(t, got, task)
	}
	wantErr(t, st.SetTaskState(ctx, domain.TaskID(newID()), domain.TaskIdle, "", t0), store.ErrNotFound)
	if err := st.SetTaskState(ctx, task.ID, "paused", "", t0); err == nil {
		t.Fatal("SetTaskState accepted an unknown state")
	}
	got, err := st.GetTask(ctx, task.ID)
	must(t, err)
	wantTask(t, got, task)
}

func testTaskSessions(t *testing.T, st store.Store) {
	ctx := t.Context()
	task := createTask(t, st, createProfile(t, st, "go"))
	steps := []struct {
		session domain.SessionID
		wantSeq int64
	}{
		{"sess-1", 1},
		{"sess-2", 2},
		{"sess-2", 2}, // the current session again: idempotent
		{"sess-1", 3}, // an earlier one again is a new attach
	}
	var want []string
	for i, s := range steps {
		at := t0.Add(time.Duration(i+1) * time.Minute)
		ts, err := st.AttachSession(ctx, task.ID, s.session, at)
		must(t, err)
		if ts.TaskID != task.ID || ts.Seq != s.wantSeq || ts.SessionID != s.session {
			t.Fatalf("attach %d (%s) = %+v, want seq %d", i, s.session, ts, s.wantSeq)
		}
		if int64(len(want)) < s.wantSeq {
			want = append(want, fmt.Sprintf("%d:%s@%d", s.wantSeq, s.session, i+1))
			task.SessionID, task.UpdatedAt = s.session, at
		}
		got, err := st.GetTask(ctx, task.ID)
		must(t, err)
		wantTask(t, got, task)
	}
	list, err := st.ListTaskSessions(ctx, task.ID)
	must(t, err)
	var got []string
	for _, ts := range list {
		got = append(got, fmt.Sprintf("%d:%s@%d", ts.Seq, ts.SessionID, int(ts.CreatedAt.Sub(t0)/time.Minute)))
		if ts.CreatedAt.Location() != time.UTC {
			t.Fatalf("task session created_at %v not in UTC", ts.CreatedAt)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("task sessions = %v, want %v", got, want)
	}

	_, err = st.AttachSession(ctx, domain.TaskID(newID()), "sess-1", t0)
	wantErr(t, err, store.ErrNotFound)
	if _, err := st.AttachSession(ctx, task.ID, "", t0); err == nil {
		t.Fatal("AttachSession accepted an empty session id")
	}
	list, err = st.ListTaskSessions(ctx, domain.TaskID(newID()))
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("sessions of an unknown task = %+v", list)
	}
}

// testTaskSessionsConcurrent attaches distinct sessions to one task from
// many goroutines: every attach succeeds with its own seq, 1..n, and the
// task's current session is the one attached last.
func testTaskSessionsConcurrent(t *testing.T, st store.Store) {
	const n = 8
	task := createTask(t, st, createProfile(t, st, "go"))
	seqs := make([]int64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ts, err := st.AttachSession(t.Context(), task.ID, domain.SessionID(fmt.Sprintf("sess-%d", i)), t0)
			seqs[i], errs[i] = ts.Seq, err
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for i := range n {
		must(t, errs[i])
		if seqs[i] < 1 || seqs[i] > n || seen[seqs[i]] {
			t.Fatalf("concurrent attaches got seqs %v, want 1..%d each once", seqs, n)
		}
		seen[seqs[i]] = true
	}
	list, err := st.ListTaskSessions(t.Context(), task.ID)
	must(t, err)
	if len(list) != n || list[n-1].Seq != n {
		t.Fatalf("task sessions after concurrent attaches = %+v", list)
	}
	got, err := st.GetTask(t.Context(), task.ID)
	must(t, err)
	if got.SessionID != list[n-1].SessionID {
		t.Fatalf("current session = %s, want the last attached %s", got.SessionID, list[n-1].SessionID)
	}
}

func testTaskEvents(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	task, other := createTask(t, st, p), createTask(t, st, p)
	got, err := st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{
		{Type: "prompt", Payload: json.RawMessage(`{"text": "create hello.txt"}`), At: t0},
		{Type: "run_started", At: t0.Add(time.Second)},
		{TaskID: other.ID, Seq: 99, Type: "text", Payload: json.RawMessage(`{"delta":"hi"}`), At: t0.Add(2 * time.Second)},
	})
	must(t, err)
	more, err := st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "idle"}})
	must(t, err)
	if len(more) != 1 || more[0].Seq != 4 || more[0].At.IsZero() || more[0].At.Location() != time.UTC {
		t.Fatalf("appended %+v, want seq 4 stamped now in UTC", more)
	}
	// Seqs are per task.
	o, err := st.AppendTaskEvents(ctx, other.ID, []domain.TaskEvent{{Type: "prompt"}})
	must(t, err)
	if len(o) != 1 || o[0].Seq != 1 || o[0].TaskID != other.ID {
		t.Fatalf("other task's first event = %+v", o)
	}
	got = append(got, more...)
	for i, e := range got {
		if e.TaskID != task.ID || e.Seq != int64(i+1) {
			t.Fatalf("returned event %d = %+v", i, e)
		}
	}
	stored, err := st.ListTaskEvents(ctx, task.ID, 0, 0)
	must(t, err)
	if len(stored) != len(got) {
		t.Fatalf("stored %d events, appended %d", len(stored), len(got))
	}
	for i := range got {
		if stored[i].TaskID != got[i].TaskID || stored[i].Seq != got[i].Seq || stored[i].Type != got[i].Type {
			t.Fatalf("stored event %d = %+v, append returned %+v", i, stored[i], got[i])
		}
		wantJSON(t, "payload", stored[i].Payload, got[i].Payload)
		wantTime(t, "at", stored[i].At, got[i].At)
	}
	wantJSON(t, "payload", stored[0].Payload, json.RawMessage(`{"text": "create hello.txt"}`))
	wantTime(t, "at", stored[2].At, t0.Add(2*time.Second))
	if stored[1].Payload != nil {
		t.Fatalf("payload of an event appended without one = %s", stored[1].Payload)
	}
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	task.EventSeq = 4
	for _, e := range stored {
		task.EventBytes += int64(len(e.Type) + len(e.Payload))
	}
	wantTask(t, cur, task) // only event_seq and event_bytes changed
	listCases(t, st, task.ID)

	// No events: nothing written.
	none, err := st.AppendTaskEvents(ctx, task.ID, nil)
	if err != nil || none != nil {
		t.Fatalf("append of no events = %+v, %v", none, err)
	}
	cur, err = st.GetTask(ctx, task.ID)
	must(t, err)
	wantTask(t, cur, task)
}

func listCases(t *testing.T, st store.Store, taskID domain.TaskID) {
	t.Helper()
	cases := []struct {
		after int64
		limit int
		want  []int64
	}{
		{0, 0, []int64{1, 2, 3, 4}},
		{1, 0, []int64{2, 3, 4}},
		{1, 2, []int64{2, 3}},
		{0, -1, []int64{1, 2, 3, 4}},
		{4, 10, nil},
	}
	for _, c := range cases {
		list, err := st.ListTaskEvents(t.Context(), taskID, c.after, c.limit)
		must(t, err)
		var seqs []int64
		for _, e := range list {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != fmt.Sprint(c.want) {
			t.Errorf("ListTaskEvents(after %d, limit %d) = %v, want %v", c.after, c.limit, seqs, c.want)
		}
	}
	list, err := st.ListTaskEvents(t.Context(), domain.TaskID(newID()), 0, 0)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("events of an unknown task = %+v", list)
	}
}

func testTaskEventsRejected(t *testing.T, st store.Store) {
	ctx := t.Context()
	task := createTask(t, st, createProfile(t, st, "go"))
	_, err := st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "prompt"}})
	must(t, err)
	cases := []struct {
		name   string
		taskID domain.TaskID
		events []domain.TaskEvent
		want   error // nil: any error
	}{
		{"unknown task", domain.TaskID(newID()), []domain.TaskEvent{{Type: "prompt"}}, store.ErrNotFound},
		{"no task id", "", []domain.TaskEvent{{Type: "prompt"}}, nil},
		{"one without type", task.ID, []domain.TaskEvent{{Type: "text"}, {}, {Type: "idle"}}, nil},
		{"one with bad payload", task.ID,
			[]domain.TaskEvent{{Type: "text"}, {Type: "tool", Payload: json.RawMessage(`{`)}}, nil},
	}
	for _, c := range cases {
		_, err := st.AppendTaskEvents(ctx, c.taskID, c.events)
		if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
			t.Errorf("%s: AppendTaskEvents error = %v, want %v", c.name, err, c.want)
		}
	}
	// Nothing of a refused batch was written, and no seq was spent.
	list, err := st.ListTaskEvents(ctx, task.ID, 0, 0)
	must(t, err)
	if len(list) != 1 {
		t.Fatalf("events after refused appends = %+v, want 1", list)
	}
	got, err := st.AppendTaskEvents(ctx, task.ID, []domain.TaskEvent{{Type: "text"}})
	must(t, err)
	if got[0].Seq != 2 {
		t.Fatalf("seq after refused appends = %d, want 2", got[0].Seq)
	}
	cur, err := st.GetTask(ctx, task.ID)
	must(t, err)
	if cur.EventSeq != 2 {
		t.Fatalf("event_seq = %d, want 2", cur.EventSeq)
	}
}

// AppendTaskEventsConcurrently has workers on stores append batches of 1
// to 3 events to one task, each until it appended each batches. Every
// batch must get consecutive seqs, and all seqs together must be 1..N,
// each once, with the task's event_seq at N.
func AppendTaskEventsConcurrently(t *testing.T, stores []store.Store, workers, each int) {
	t.Helper()
	task := createTask(t, stores[0], createProfile(t, stores[0], "busy"))
	var mu sync.Mutex
	owner := map[int64]string{} // seq -> "w/i/k"
	var total int
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		st := stores[w%len(stores)]
		wg.Go(func() {
			for i := range each {
				batch := make([]domain.TaskEvent, 1+(w+i)%3)
				for k := range batch {
					batch[k] = domain.TaskEvent{Type: "text", Payload: json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d,"k":%d}`, w, i, k))}
				}
				got, err := st.AppendTaskEvents(t.Context(), task.ID, batch)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				total += len(batch)
				for k, e := range got {
					if k > 0 && e.Seq != got[0].Seq+int64(k) {
						t.Errorf("batch %d/%d got seqs that are not consecutive: %+v", w, i, got)
					}
					if prev, ok := owner[e.Seq]; ok {
						t.Errorf("seq %d handed out twice: %s and %d/%d/%d", e.Seq, prev, w, i, k)
					}
					owner[e.Seq] = fmt.Sprintf("%d/%d/%d", w, i, k)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	list, err := stores[len(stores)-1].ListTaskEvents(t.Context(), task.ID, 0, 0)
	must(t, err)
	if len(list) != total {
		t.Fatalf("stored %d events, appended %d", len(list), total)
	}
	for i, e := range list {
		var p struct{ W, I, K int }
		must(t, json.Unmarshal(e.Payload, &p))
		if e.Seq != int64(i+1) || owner[e.Seq] != fmt.Sprintf("%d/%d/%d", p.W, p.I, p.K) {
			t.Fatalf("stored event %d = seq %d %s; append returned that seq to %s", i, e.Seq, e.Payload, owner[e.Seq])
		}
	}
	got, err := stores[0].GetTask(t.Context(), task.ID)
	must(t, err)
	if got.EventSeq != int64(total) {
		t.Fatalf("event_seq = %d, want %d", got.EventSeq, total)
	}
}

// testTaskListPages walks the task list two at a time by keyset: every
// task once, in order, also across tasks created at the same instant.
func testTaskListPages(t *testing.T, st store.Store) {
	ctx := t.Context()
	p := createProfile(t, st, "go")
	var want []domain.TaskID
	for i := range 5 {
		task := newTask(p)
		task.CreatedAt = t0.Add(time.Duration(i/2) * time.Minute) // two and two at the same instant
		_, err := st.CreateTask(ctx, task)
		must(t, err)
		want = append(want, task.ID)
	}
	all, err := st.ListTasks(ctx, domain.TaskFilter{})
	must(t, err)
	var got []domain.TaskID
	f := domain.TaskFilter{Limit: 2}
	for range 10 {
		page, err := st.ListTasks(ctx, f)
		must(t, err)
		for _, task := range page {
			got = append(got, task.ID)
		}
		if len(page) < f.Limit {
			break
		}
		last := page[len(page)-1]
		f.AfterCreated, f.AfterID = last.CreatedAt, last.ID
	}
	var order []domain.TaskID
	for _, task := range all {
		order = append(order, task.ID)
	}
	wantSame(t, "tasks paged", got, order)
	if len(got) != len(want) {
		t.Fatalf("paged %d tasks, want %d", len(got), len(want))
	}
}
