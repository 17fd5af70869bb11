package autorun

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/tasks"
	"github.com/engrams/engrams/internal/testutil"
)

// db is one database the tests run on: both backends, each test its own.
type db struct {
	name       string
	sqlitePath string
	pgURL      string
}

func databases(t *testing.T) []db {
	return []db{
		{name: "sqlite", sqlitePath: filepath.Join(t.TempDir(), "engrams.db")},
		{name: "postgres", pgURL: testutil.NewPostgresDB(t)},
	}
}

func (d db) open(t *testing.T) store.Store {
	t.Helper()
	st, err := d.openPlain()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func (d db) openPlain() (store.Store, error) {
	if d.sqlitePath != "" {
		return sqlite.Open(context.Background(), sqlite.Config{Path: d.sqlitePath}, sqlite.Deps{})
	}
	return postgres.Open(context.Background(), postgres.Config{URL: d.pgURL}, postgres.Deps{})
}

// env is a Runner on a database with fake tasks, running until the test ends.
type env struct {
	st    store.Store
	r     *Runner
	tasks *fakeTasks
}

type envOpt func(*Config, *Deps)

func newEnv(t *testing.T, d db, executor string, ft *fakeTasks, opts ...envOpt) *env {
	t.Helper()
	st := d.open(t)
	r := openRunner(t, d, st, executor, ft, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner %s: %v", executor, err)
		}
	})
	return &env{st: st, r: r, tasks: ft}
}

func openRunner(t testing.TB, d db, st store.Store, executor string, ft *fakeTasks, opts ...envOpt) *Runner {
	t.Helper()
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{ExecutorID: executor, SQLitePath: d.sqlitePath, PostgresURL: d.pgURL, Heartbeat: 100 * time.Millisecond,
		StaleAfter: 2 * time.Second, QueuePoll: 50 * time.Millisecond, ScheduleEvery: time.Hour}
	deps := Deps{Store: st, Tasks: ft, TaskReads: ft, Sealer: sealer, NewID: func() string { return uuid.Must(uuid.NewV7()).String() }}
	for _, o := range opts {
		o(&cfg, &deps)
	}
	r, err := Open(context.Background(), cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRun waits until a run is in one of states.
func (e *env) waitRun(t *testing.T, id domain.AutomationRunID, states ...domain.RunState) domain.AutomationRun {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		run, err := e.st.GetRun(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range states {
			if run.State == s {
				return run
			}
		}
		if time.Now().After(deadline) {
			steps, _ := e.st.ListSteps(t.Context(), id)
			t.Fatalf("run %s is %s (%s), want %v; steps %+v", id, run.State, run.Error, states, steps)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeTasks is TaskControl and TaskReads over tasks kept in memory. A
// prompt ends its turn at once ("re: PROMPT") unless hold is set.
// Every side effect is a line appended to log (a file, so a test's
// child process and the test share it).
type fakeTasks struct {
	mu     sync.Mutex
	tasks  map[domain.TaskID]*domain.Task
	events map[domain.TaskID][]domain.TaskEvent
	hold   bool // turns never end
	idle   bool // every task reads idle with its turns ended, known or not (a replica after a crash)
	log    string
	subs   []chan struct{}
	// grantees are whose grants each task was started with.
	grantees map[domain.TaskID]domain.Grantee
}

func newFakeTasks(t testing.TB, log string) *fakeTasks {
	if log == "" {
		log = filepath.Join(t.TempDir(), "effects.log")
	}
	return &fakeTasks{tasks: map[domain.TaskID]*domain.Task{}, events: map[domain.TaskID][]domain.TaskEvent{}, log: log,
		grantees: map[domain.TaskID]domain.Grantee{}}
}

func (f *fakeTasks) effect(format string, args ...any) {
	fh, err := os.OpenFile(f.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	fmt.Fprintf(fh, format+"\n", args...)
	fh.Close()
}

func effects(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func (f *fakeTasks) appendLocked(id domain.TaskID, typ string, payload any) {
	raw, _ := json.Marshal(payload)
	evs := f.events[id]
	f.events[id] = append(evs, domain.TaskEvent{TaskID: id, Seq: int64(len(evs) + 1), Type: typ, Payload: raw})
}

func (f *fakeTasks) promptLocked(id domain.TaskID, text string) {
	f.appendLocked(id, tasks.TaskEventPrompt, map[string]string{"text": text})
	t := f.tasks[id]
	if f.hold {
		t.State = domain.TaskRunning
		return
	}
	f.appendLocked(id, guestapi.EventIdle, guestapi.IdleData{Result: "re: " + text})
	t.State = domain.TaskIdle
}

func (f *fakeTasks) wakeLocked() {
	for _, c := range f.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (f *fakeTasks) StartTask(_ context.Context, req tasks.StartTaskRequest) (domain.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.tasks[req.ID]; ok {
		return *t, nil
	}
	f.effect("start %s %s", req.Profile, req.Prompt)
	f.grantees[req.ID] = req.Grantee
	f.tasks[req.ID] = &domain.Task{ID: req.ID, State: domain.TaskStarting, SessionID: "s-" + domain.SessionID(req.ID), RunID: req.RunID,
		Owner: req.Owner}
	f.promptLocked(req.ID, req.Prompt)
	f.wakeLocked()
	return *f.tasks[req.ID], nil
}

func (f *fakeTasks) SendTask(_ context.Context, id domain.TaskID, text string) (domain.TaskEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tasks[id]; !ok {
		return domain.TaskEvent{}, fmt.Errorf("%w: task %s", domain.ErrNotFound, id)
	}
	f.effect("send %s", text)
	f.promptLocked(id, text)
	f.wakeLocked()
	return f.events[id][len(f.events[id])-1], nil
}

func (f *fakeTasks) StopTask(_ context.Context, id domain.TaskID) (domain.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.effect("stop")
	t, ok := f.tasks[id]
	if !ok {
		t = &domain.Task{ID: id}
		f.tasks[id] = t
	}
	t.State = domain.TaskStopped
	return *t, nil
}

func (f *fakeTasks) GetTask(_ context.Context, id domain.TaskID) (domain.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle {
		return domain.Task{ID: id, State: domain.TaskIdle}, nil
	}
	t, ok := f.tasks[id]
	if !ok {
		return domain.Task{}, fmt.Errorf("%w: task %s", domain.ErrNotFound, id)
	}
	return *t, nil
}

func (f *fakeTasks) ListTaskEvents(_ context.Context, id domain.TaskID, after int64, limit int) ([]domain.TaskEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.idle && len(f.events[id]) == 0 {
		raw, _ := json.Marshal(guestapi.IdleData{Result: "done elsewhere"})
		return []domain.TaskEvent{{Seq: 1, Type: guestapi.EventIdle, Payload: raw}}, nil
	}
	var out []domain.TaskEvent
	for _, ev := range f.events[id] {
		if ev.Seq > after && len(out) < limit {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (f *fakeTasks) Subscribe(ctx context.Context, _ string) <-chan struct{} {
	c := make(chan struct{}, 1)
	f.mu.Lock()
	f.subs = append(f.subs, c)
	f.mu.Unlock()
	return c
}

// finish ends every task's running turn.
func (f *fakeTasks) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = false
	for id, t := range f.tasks {
		if t.State == domain.TaskRunning {
			f.appendLocked(id, guestapi.EventIdle, guestapi.IdleData{Result: "finished"})
			t.State = domain.TaskIdle
		}
	}
	f.wakeLocked()
}
