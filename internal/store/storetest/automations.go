package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

var automationTests = []test{
	{"AutomationVersions", testAutomationVersions},
	{"AutomationLookupsAndDelete", testAutomationLookups},
	{"AutomationRunDedup", testAutomationRunDedup},
	{"AutomationRunCaps", testAutomationRunCaps},
	{"AutomationRunTransitionsAndPages", testAutomationRunTransitions},
	{"AutomationStepAttempts", testAutomationSteps},
	{"AutomationStaleExecutorTakenOnce", testAutomationExecutors},
	{"AutomationsAndRunsBelongToTheirOrganisation", testAutomationOrgs},
}

// testAutomationOrgs: reads by name and lists are of one organisation
// (the scheduler's list, of every one); a run keeps its organisation;
// names stay unique in the deployment.
func testAutomationOrgs(t *testing.T, st store.Store) {
	ctx := t.Context()
	mine := newAutomation(t, st, "mine", "slack_mention", "")
	theirs, err := st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(newID()), Org: "org-b", Name: "theirs", TriggerKind: "slack_mention",
		Enabled: true, CreatedAt: t0}, []byte(`{"name":"theirs"}`))
	must(t, err)
	_, err = st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(newID()), Org: "org-b", Name: "mine", TriggerKind: "manual"}, []byte(`{}`))
	wantErr(t, err, store.ErrConflict)
	_, err = st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(newID()), Name: "no-org", TriggerKind: "manual"}, []byte(`{}`))
	if err == nil {
		t.Fatal("CreateAutomation took an automation of no organisation")
	}
	_, err = st.GetAutomationByName(ctx, "org-b", "mine")
	wantErr(t, err, store.ErrNotFound)
	if got, err := st.GetAutomationByName(ctx, "org-b", "theirs"); err != nil || got.ID != theirs.ID || got.Org != "org-b" {
		t.Fatalf("org-b's by name = %+v, %v", got, err)
	}
	for org, want := range map[domain.OrgID][]domain.AutomationID{domain.FirstOrg: {mine.ID}, "org-b": {theirs.ID}, "": {mine.ID, theirs.ID}, "org-c": nil} {
		as, err := st.ListAutomations(ctx, org, "")
		must(t, err)
		var got []domain.AutomationID
		for _, a := range as {
			got = append(got, a.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("automations of %q = %v, want %v", org, got, want)
		}
	}
	if as, err := st.ListAutomations(ctx, "org-b", "slack_mention"); err != nil || len(as) != 1 {
		t.Errorf("org-b's enabled slack automations = %+v, %v", as, err)
	}
	run, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: theirs.ID, Org: "org-b", Version: 1,
		State: domain.RunQueued, TriggerKind: "manual", CreatedAt: t0})
	must(t, err)
	if got, err := st.GetRun(ctx, run.ID); err != nil || got.Org != "org-b" {
		t.Fatalf("run = %+v, %v", got, err)
	}
	if _, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: theirs.ID, Version: 1,
		State: domain.RunQueued, TriggerKind: "manual", CreatedAt: t0}); err == nil {
		t.Fatal("CreateRun took a run of no organisation")
	}
}

func newAutomation(t *testing.T, st store.Store, name, kind, slug string) domain.Automation {
	t.Helper()
	a, err := st.CreateAutomation(t.Context(), domain.Automation{ID: domain.AutomationID(newID()), Org: domain.FirstOrg, Name: name, TriggerKind: kind,
		HookSlug: slug, CreatedAt: t0}, []byte(`{"name":"`+name+`"}`))
	must(t, err)
	return a
}

func testAutomationVersions(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "nightly", "schedule", "")
	if a.Version != 1 || a.Enabled || a.HookSlug != "" || a.HookSecret != nil {
		t.Fatalf("created: %+v", a)
	}
	wantTime(t, "created_at", a.CreatedAt, t0)
	a.TriggerKind, a.HookSlug, a.HookSecret, a.UpdatedAt = "webhook", "deploy", []byte("sealed-1"), t0.Add(time.Minute)
	b, err := st.UpdateAutomation(ctx, a, []byte(`{"v":2}`), 1)
	must(t, err)
	if b.Version != 2 || b.TriggerKind != "webhook" || b.HookSlug != "deploy" || !bytes.Equal(b.HookSecret, []byte("sealed-1")) {
		t.Fatalf("updated: %+v", b)
	}
	_, err = st.UpdateAutomation(ctx, a, []byte(`{"v":3}`), 1)
	wantErr(t, err, store.ErrConflict)
	v1, err := st.GetAutomationVersion(ctx, a.ID, 1)
	must(t, err)
	v2, err := st.GetAutomationVersion(ctx, a.ID, 2)
	must(t, err)
	if string(v1.Definition) != `{"name":"nightly"}` || string(v2.Definition) != `{"v":2}` {
		t.Fatalf("versions: %s, %s", v1.Definition, v2.Definition)
	}
	_, err = st.GetAutomationVersion(ctx, a.ID, 3)
	wantErr(t, err, store.ErrNotFound)
	_, err = st.UpdateAutomation(ctx, domain.Automation{ID: "nope", Org: domain.FirstOrg, Name: "x", TriggerKind: "manual"}, []byte(`{}`), 1)
	wantErr(t, err, store.ErrNotFound)
	if _, err := st.UpdateAutomation(ctx, a, []byte(`{bad`), 2); err == nil {
		t.Fatal("a malformed definition was saved")
	}
	// The hook secret is a sealed row like the others.
	sealed, err := st.ListSealed(ctx, domain.SealedHookSecret, "", 0)
	must(t, err)
	if len(sealed) != 1 || sealed[0].ID != string(a.ID) || string(sealed[0].Sealed) != "sealed-1" {
		t.Fatalf("sealed hook secrets: %+v", sealed)
	}
	must(t, st.ReplaceSealed(ctx, domain.SealedHookSecret, string(a.ID), []byte("sealed-1"), []byte("sealed-2")))
	got, err := st.GetAutomation(ctx, a.ID)
	must(t, err)
	if string(got.HookSecret) != "sealed-2" {
		t.Fatalf("resealed secret = %q", got.HookSecret)
	}
}

func testAutomationLookups(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "a-hook", "webhook", "hook-a")
	newAutomation(t, st, "b-cron", "schedule", "")
	c := newAutomation(t, st, "c-cron", "schedule", "")
	_, err := st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(newID()), Org: domain.FirstOrg, Name: "a-hook", TriggerKind: "manual"}, []byte(`{}`))
	wantErr(t, err, store.ErrConflict)
	_, err = st.CreateAutomation(ctx, domain.Automation{ID: domain.AutomationID(newID()), Org: domain.FirstOrg, Name: "other", TriggerKind: "webhook", HookSlug: "hook-a"}, []byte(`{}`))
	wantErr(t, err, store.ErrConflict)
	if got, err := st.GetAutomationBySlug(ctx, "hook-a"); err != nil || got.ID != a.ID {
		t.Fatalf("by slug: %+v, %v", got, err)
	}
	if got, err := st.GetAutomationByName(ctx, domain.FirstOrg, "c-cron"); err != nil || got.ID != c.ID {
		t.Fatalf("by name: %+v, %v", got, err)
	}
	_, err = st.GetAutomationBySlug(ctx, "nope")
	wantErr(t, err, store.ErrNotFound)
	_, err = st.SetAutomationEnabled(ctx, c.ID, true, t0)
	must(t, err)
	all, err := st.ListAutomations(ctx, domain.FirstOrg, "")
	must(t, err)
	crons, err := st.ListAutomations(ctx, domain.FirstOrg, "schedule")
	must(t, err)
	if len(all) != 3 || all[0].Name != "a-hook" || len(crons) != 1 || crons[0].ID != c.ID || !crons[0].Enabled {
		t.Fatalf("all %d (first %s), enabled schedules %+v", len(all), all[0].Name, crons)
	}
	run, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: c.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunRunning, TriggerKind: "slack_mention", ActorID: "u-ada"})
	must(t, err)
	if got, err := st.GetRun(ctx, run.ID); err != nil || got.ActorID != "u-ada" || run.ActorID != "u-ada" {
		t.Fatalf("run's actor = %q (read back %q, %v), want u-ada", run.ActorID, got.ActorID, err)
	}
	_, err = st.BeginStep(ctx, domain.RunStep{RunID: run.ID, Seq: 1, BlockID: "b", Kind: "run_command"})
	must(t, err)
	must(t, st.DeleteAutomation(ctx, c.ID))
	wantErr(t, st.DeleteAutomation(ctx, c.ID), store.ErrNotFound)
	_, err = st.GetRun(ctx, run.ID)
	wantErr(t, err, store.ErrNotFound)
	if steps, err := st.ListSteps(ctx, run.ID); err != nil || len(steps) != 0 {
		t.Fatalf("steps of a deleted automation's run: %v, %v", steps, err)
	}
}

func testAutomationRunDedup(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "hook", "webhook", "h")
	b := newAutomation(t, st, "other", "webhook", "h2")
	const n = 8
	var created atomic.Int32
	ids := make([]domain.AutomationRunID, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			run, ok, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
				State: domain.RunQueued, TriggerKind: "webhook", DedupKey: "delivery-1", Trigger: []byte(`{"n":1}`), CreatedAt: t0})
			if err != nil {
				t.Errorf("create run %d: %v", i, err)
				return
			}
			if ok {
				created.Add(1)
			}
			ids[i] = run.ID
		})
	}
	wg.Wait()
	if created.Load() != 1 {
		t.Fatalf("%d runs created for one delivery, want 1", created.Load())
	}
	if got, err := st.GetRunByDedupKey(ctx, a.ID, "delivery-1"); err != nil || got.ID != ids[0] {
		t.Fatalf("the run of the delivery's key: %+v %v", got, err)
	}
	if _, err := st.GetRunByDedupKey(ctx, b.ID, "delivery-1"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("another automation's run of the key: %v, want not found", err)
	}
	for _, id := range ids {
		if id != ids[0] {
			t.Fatalf("the same delivery answered runs %s and %s", ids[0], id)
		}
	}
	// The key is per automation; no key never deduplicates.
	if _, ok, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: b.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunQueued, TriggerKind: "webhook", DedupKey: "delivery-1"}); err != nil || !ok {
		t.Fatalf("another automation's same delivery id: created %v, %v", ok, err)
	}
	for range 2 {
		if _, ok, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
			State: domain.RunQueued, TriggerKind: "manual"}); err != nil || !ok {
			t.Fatalf("a run without a key: created %v, %v", ok, err)
		}
	}
	if _, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunQueued, Trigger: []byte(`{x`)}); err == nil {
		t.Fatal("a malformed trigger payload was stored")
	}
}

// testAutomationRunCaps: deliveries at once on every connection never
// take an automation past its caps; the ones over are recorded skipped,
// saying which cap. Skipped and refused runs do not count to the hour.
func testAutomationRunCaps(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "capped", "github_pr", "")
	const n = 8
	var made, skipped atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			run, ok, err := st.CreateCappedRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
				State: domain.RunQueued, TriggerKind: "github_pr", DedupKey: fmt.Sprint("d", i), CreatedAt: t0}, store.RunCaps{MaxActive: 3})
			if err != nil || !ok {
				t.Errorf("create run %d: %v %v", i, ok, err)
				return
			}
			switch run.State {
			case domain.RunQueued:
				made.Add(1)
			case domain.RunSkipped:
				skipped.Add(1)
				if !strings.Contains(run.Error, "max_concurrent") {
					t.Errorf("a skipped run says %q", run.Error)
				}
			}
		})
	}
	wg.Wait()
	if made.Load() != 3 || skipped.Load() != n-3 {
		t.Fatalf("%d runs queued, %d skipped under a cap of 3 at once", made.Load(), skipped.Load())
	}
	// The hour: 3 active runs count; a fourth is over 3 an hour, and an
	// hour later there is room again.
	b := newAutomation(t, st, "hourly", "github_pr", "")
	for i := range 4 {
		run, _, err := st.CreateCappedRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: b.ID, Org: domain.FirstOrg, Version: 1,
			State: domain.RunQueued, TriggerKind: "github_pr", CreatedAt: t0.Add(time.Duration(i) * time.Minute)}, store.RunCaps{MaxPerHour: 3})
		must(t, err)
		if want := map[bool]domain.RunState{true: domain.RunSkipped, false: domain.RunQueued}[i == 3]; run.State != want {
			t.Fatalf("run %d is %s (%s), want %s", i, run.State, run.Error, want)
		}
	}
	run, _, err := st.CreateCappedRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: b.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunQueued, TriggerKind: "github_pr", CreatedAt: t0.Add(61 * time.Minute)}, store.RunCaps{MaxPerHour: 3})
	must(t, err)
	if run.State != domain.RunQueued {
		t.Fatalf("an hour on: %s %s", run.State, run.Error)
	}
	// A run superseding its key's active runs is not held back by them.
	c := newAutomation(t, st, "superseding", "github_pr", "")
	for i, key := range []string{"acme/app#1", "acme/app#2", "acme/app#1"} {
		run, _, err := st.CreateCappedRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: c.ID, Org: domain.FirstOrg, Version: 1,
			State: domain.RunQueued, TriggerKind: "github_pr", ConcurrencyKey: key, CreatedAt: t0},
			store.RunCaps{MaxActive: 2, Superseding: key})
		must(t, err)
		if run.State != domain.RunQueued {
			t.Fatalf("run %d (%s) under a cap of 2, superseding its key: %s %s", i, key, run.State, run.Error)
		}
	}
	// A refused run is recorded as it is, cap or not.
	run, _, err = st.CreateCappedRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunRefused, Error: "refused: below the floor", TriggerKind: "github_pr", CreatedAt: t0, EndedAt: t0}, store.RunCaps{MaxActive: 1})
	must(t, err)
	if run.State != domain.RunRefused || run.Error != "refused: below the floor" || run.EndedAt.IsZero() {
		t.Fatalf("a refused run: %+v", run)
	}
}

func testAutomationRunTransitions(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "pr", "github_pr", "")
	var runs []domain.AutomationRun
	for i := range 5 {
		run, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
			State: domain.RunQueued, TriggerKind: "github_pr", ConcurrencyKey: fmt.Sprintf("acme/app#%d", i%2), Inputs: []byte(`{"depth":2}`),
			CreatedAt: t0.Add(time.Duration(i) * time.Second)})
		must(t, err)
		runs = append(runs, run)
	}
	started := t0.Add(time.Minute)
	r0, err := st.TransitionRun(ctx, runs[0].ID, domain.RunQueued, domain.RunRunning, store.RunPatch{StartedAt: started}, started)
	must(t, err)
	if r0.State != domain.RunRunning || string(r0.Inputs) != `{"depth":2}` {
		t.Fatalf("started: %+v", r0)
	}
	wantTime(t, "started_at", r0.StartedAt, started)
	_, err = st.TransitionRun(ctx, runs[0].ID, domain.RunQueued, domain.RunRunning, store.RunPatch{}, started)
	wantErr(t, err, store.ErrConflict)
	ended := started.Add(time.Minute)
	r0, err = st.TransitionRun(ctx, runs[0].ID, domain.RunRunning, domain.RunFailed, store.RunPatch{Error: "block b: boom", EndedAt: ended}, ended)
	must(t, err)
	if r0.Error != "block b: boom" || !r0.StartedAt.Equal(started) {
		t.Fatalf("failed: %+v", r0)
	}
	wantTime(t, "ended_at", r0.EndedAt, ended)
	_, err = st.TransitionRun(ctx, "nope", domain.RunQueued, domain.RunRunning, store.RunPatch{}, ended)
	wantErr(t, err, store.ErrNotFound)
	active, err := st.ActiveRuns(ctx, a.ID, "acme/app#0")
	must(t, err)
	if len(active) != 2 || active[0].ID != runs[2].ID || active[1].ID != runs[4].ID {
		t.Fatalf("active runs with key #0: %+v", active)
	}
	queued, err := st.QueuedRuns(ctx, t0.Add(3*time.Second), 10)
	must(t, err)
	if len(queued) != 2 || queued[0].ID != runs[1].ID || queued[1].ID != runs[2].ID {
		t.Fatalf("queued runs created before t0+3s: %+v", queued)
	}
	page, err := st.ListRuns(ctx, a.ID, "", 3)
	must(t, err)
	next, err := st.ListRuns(ctx, a.ID, page[2].ID, 3)
	must(t, err)
	if len(page) != 3 || page[0].ID != runs[4].ID || len(next) != 2 || next[1].ID != runs[0].ID {
		t.Fatalf("pages: %d then %d", len(page), len(next))
	}
}

func testAutomationSteps(t *testing.T, st store.Store) {
	ctx := t.Context()
	a := newAutomation(t, st, "steps", "manual", "")
	run, _, err := st.CreateRun(ctx, domain.AutomationRun{ID: domain.AutomationRunID(newID()), AutomationID: a.ID, Org: domain.FirstOrg, Version: 1,
		State: domain.RunRunning, TriggerKind: "manual"})
	must(t, err)
	for seq := int64(1); seq <= 2; seq++ {
		n, err := st.BeginStep(ctx, domain.RunStep{RunID: run.ID, Seq: seq, BlockID: fmt.Sprint("b", seq), Kind: "run_command",
			Path: fmt.Sprintf("blocks[%d]", seq-1), Input: []byte(`{"command":"ls"}`), StartedAt: t0})
		must(t, err)
		if n != 1 {
			t.Fatalf("first attempt = %d", n)
		}
	}
	must(t, st.EndStep(ctx, domain.RunStep{RunID: run.ID, Seq: 1, State: domain.StepSucceeded, Output: "ok", EndedAt: t0.Add(time.Second)}))
	// Step 2 ran when its replica died: it runs again.
	n, err := st.BeginStep(ctx, domain.RunStep{RunID: run.ID, Seq: 2, BlockID: "b2", Kind: "run_command", Path: "blocks[1]", StartedAt: t0.Add(time.Minute)})
	must(t, err)
	if n != 2 {
		t.Fatalf("second attempt = %d", n)
	}
	must(t, st.EndStep(ctx, domain.RunStep{RunID: run.ID, Seq: 2, State: domain.StepFailed, Error: "exit 1", EndedAt: t0.Add(2 * time.Minute)}))
	wantErr(t, st.EndStep(ctx, domain.RunStep{RunID: run.ID, Seq: 3, State: domain.StepFailed}), store.ErrNotFound)
	steps, err := st.ListSteps(ctx, run.ID)
	must(t, err)
	if len(steps) != 2 {
		t.Fatalf("%d steps", len(steps))
	}
	s1, s2 := steps[0], steps[1]
	if s1.State != domain.StepSucceeded || s1.Output != "ok" || s1.Attempt != 1 || string(s1.Input) != `{"command":"ls"}` || s1.Path != "blocks[0]" {
		t.Fatalf("step 1: %+v", s1)
	}
	if s2.State != domain.StepFailed || s2.Error != "exit 1" || s2.Attempt != 2 || s2.Output != "" {
		t.Fatalf("step 2: %+v", s2)
	}
	wantTime(t, "step 1 ended_at", s1.EndedAt, t0.Add(time.Second))
	wantTime(t, "step 2 started_at", s2.StartedAt, t0.Add(time.Minute))
}

func testAutomationExecutors(t *testing.T, st store.Store) {
	ctx := t.Context()
	must(t, st.ExecutorHeartbeat(ctx, "dead", t0))
	must(t, st.ExecutorHeartbeat(ctx, "live", t0))
	must(t, st.ExecutorHeartbeat(ctx, "live", t0.Add(time.Minute)))
	const n = 6
	var taken atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			id, err := st.TakeStaleExecutor(ctx, t0.Add(30*time.Second))
			if err != nil {
				t.Errorf("take stale executor: %v", err)
			}
			switch id {
			case "dead":
				taken.Add(1)
			case "":
			default:
				t.Errorf("took %q, which is live", id)
			}
		})
	}
	wg.Wait()
	if taken.Load() != 1 {
		t.Fatalf("the stale executor was taken %d times, want once", taken.Load())
	}
	if id, err := st.TakeStaleExecutor(ctx, t0.Add(2*time.Minute)); err != nil || id != "live" {
		t.Fatalf("later: took %q, %v", id, err)
	}
}
