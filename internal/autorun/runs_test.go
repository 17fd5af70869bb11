package autorun

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hookapp"
	"github.com/engrams/engrams/internal/intake"
)

// steered starts a task, steers it in a bounded loop and a condition,
// and ends its session.
const steered = `
name: steered
trigger: {kind: manual}
inputs:
  - {name: topic, type: string, required: true}
  - {name: passes, type: number, default: 2}
  - {name: strict, type: boolean, default: false}
blocks:
  - {id: task, kind: start_task, profile: dev, prompt: "work on {{inputs.topic}} ({{trigger.source}})"}
  - {id: idle, kind: wait_idle, task: task, timeout: 1m}
  - id: again
    kind: loop
    max: 2
    body:
      - {id: more, kind: send_prompt, task: task, prompt: "more after {{steps.idle.output}}"}
  - id: check
    kind: condition
    if: "{{inputs.strict}}"
    then:
      - {id: strict, kind: send_prompt, task: task, prompt: strict}
    else:
      - {id: lax, kind: send_prompt, task: task, prompt: lax}
  - {id: stop, kind: end_session, task: task}
`

func TestRunRecordsEachStep(t *testing.T) {
	t.Parallel()
	for _, d := range databases(t) {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, d, "r1", newFakeTasks(t, ""))
			ctx := t.Context()
			if _, err := e.r.CreateAutomation(ctx, domain.FirstOrg, []byte(steered), false); err != nil {
				t.Fatal(err)
			}
			// ada starts it by hand: her grants are the task's.
			if err := e.st.CreateUser(ctx, domain.User{ID: "u-ada"}); err != nil {
				t.Fatal(err)
			}
			if err := e.st.PutMember(ctx, domain.FirstOrg, "u-ada", domain.RoleMember, time.Now()); err != nil {
				t.Fatal(err)
			}
			s, err := e.r.StartRun(ctx, domain.FirstOrg, "steered", RunRequest{Inputs: map[string]any{"topic": "docs"}, Trigger: []byte(`{"source":"cli"}`),
				Actor: "u-ada"})
			if err != nil || !s.Created {
				t.Fatalf("start: %+v, %v", s, err)
			}
			run := e.waitRun(t, s.Run.ID, domain.RunSucceeded, domain.RunFailed)
			if run.State != domain.RunSucceeded || run.StartedAt.IsZero() || run.EndedAt.Before(run.StartedAt) {
				t.Fatalf("run: %+v", run)
			}
			det, err := e.r.RunDetail(ctx, domain.FirstOrg, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, st := range det.Steps {
				if st.State != domain.StepSucceeded || st.Attempt != 1 || st.EndedAt.Before(st.StartedAt) {
					t.Errorf("step %+v", st)
				}
				got = append(got, st.Path+"="+st.BlockID)
			}
			want := []string{"blocks[0]=task", "blocks[1]=idle", "blocks[2] pass 1=again", "blocks[2].body[0] pass 1=more",
				"blocks[2] pass 2=again", "blocks[2].body[0] pass 2=more", "blocks[3]=check", "blocks[3].else[0]=lax", "blocks[4]=stop"}
			if !slices.Equal(got, want) {
				t.Fatalf("steps:\n got %v\nwant %v", got, want)
			}
			if in := string(det.Steps[0].Input); !strings.Contains(in, "work on docs (cli)") {
				t.Errorf("start_task input = %s", in)
			}
			if out := det.Steps[1].Output; out != "re: work on docs (cli)" {
				t.Errorf("wait_idle output = %q", out)
			}
			e.tasks.mu.Lock()
			started := e.tasks.tasks[domain.TaskID(det.Steps[0].Output)]
			e.tasks.mu.Unlock()
			if started == nil || started.RunID != run.ID {
				t.Errorf("the task started (%+v) does not name its run %s", started, run.ID)
			}
			// Who caused the run owns its task.
			if want := (domain.Owner{OrgID: domain.FirstOrg, UserID: "u-ada"}); run.ActorID != "u-ada" || started == nil || started.Owner != want {
				t.Errorf("run actor %q, task owner %+v; want ada's", run.ActorID, started)
			}
			wantEffects := []string{"start_dev_work_on_docs_(cli)", "send_more_after_re:_work_on_docs_(cli)",
				"send_more_after_re:_work_on_docs_(cli)", "send_lax", "stop"}
			if got := effects(t, e.tasks.log); !slices.Equal(got, wantEffects) {
				t.Fatalf("effects:\n got %v\nwant %v", got, wantEffects)
			}
		})
	}
}

func TestBadDefinitionsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, databases(t)[0], "r1", newFakeTasks(t, ""))
	for _, tc := range []struct{ name, def, want string }{
		{"unknown block", "name: a\ntrigger: {kind: manual}\nblocks: [{id: x, kind: teleport}]", `blocks[0].kind: unknown block "teleport"`},
		{"cycle", "name: a\ntrigger: {kind: manual}\nblocks: [{id: x, kind: send_prompt, task: x, prompt: hi}]", "blocks[0]"},
		{"invalid cron", "name: a\ntrigger: {kind: schedule, cron: '61 * * * *'}\nblocks: [{id: t, kind: start_task, profile: p, prompt: hi}]", "trigger.cron"},
		{"unknown input", "name: a\ntrigger: {kind: manual}\nblocks: [{id: t, kind: start_task, profile: p, prompt: '{{inputs.nope}}'}]", "blocks[0].prompt"},
		{"unknown field", "name: a\ntrigger: {kind: manual}\nblock: []", "block"},
	} {
		_, err := e.r.CreateAutomation(t.Context(), domain.FirstOrg, []byte(tc.def), false)
		if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := e.r.CreateAutomation(t.Context(), domain.FirstOrg, []byte(steered), false); err != nil {
		t.Fatal(err)
	}
	_, err := e.r.StartRun(t.Context(), domain.FirstOrg, "steered", RunRequest{Inputs: map[string]any{"passes": "many"}})
	if !errors.Is(err, domain.ErrInvalid) || !strings.Contains(err.Error(), "topic") || !strings.Contains(err.Error(), "passes") {
		t.Fatalf("a run without a required input and a bad number: %v", err)
	}
	if runs, _ := e.st.ListRuns(t.Context(), mustAutomation(t, e, "steered").ID, "", 10); len(runs) != 0 {
		t.Fatalf("a refused run was recorded: %+v", runs)
	}
}

func mustAutomation(t *testing.T, e *env, name string) domain.Automation {
	t.Helper()
	a, err := e.st.GetAutomationByName(t.Context(), domain.FirstOrg, name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

const hooked = `
name: deploy
trigger: {kind: webhook, slug: deploy}
inputs: [{name: env, type: string, default: staging}]
blocks:
  - {id: task, kind: start_task, profile: dev, prompt: "deploy {{trigger.ref}} to {{inputs.env}}"}
`

// TestWebhookDeliveries: signed deliveries through the one pipeline
// (intake) start a run; the same signed request again, with other
// delivery ids and header variants, finds that run and starts nothing;
// forged, stale and unknown ones are refused alike; a disabled hook's
// delivery starts nothing.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, databases(t)[0], "r1", newFakeTasks(t, ""))
	ctx := t.Context()
	saved, err := e.r.CreateAutomation(ctx, domain.FirstOrg, []byte(hooked), true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(saved.HookSecret, "whsec_") || len(saved.Automation.HookSecret) == 0 ||
		strings.Contains(string(saved.Automation.HookSecret), saved.HookSecret) {
		t.Fatalf("secret %q, sealed %q", saved.HookSecret, saved.Automation.HookSecret)
	}
	hooks, err := hookapp.New(hookapp.Deps{Store: e.st, Sealer: e.r.seal})
	if err != nil {
		t.Fatal(err)
	}
	in, err := intake.New(intake.Config{}, intake.Deps{Receivers: []connector.Receiver{hooks}, Deliveries: e.st, Runs: e.r})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"ref":"v1.2","inputs":{"env":"prod"}}`)
	now := time.Now()
	deliver := func(slug, id, ts, sig string, b []byte) (intake.Outcome, error) {
		h := http.Header{}
		h.Set(hookapp.HeaderTimestamp, ts)
		h.Set(hookapp.HeaderSignature, sig)
		h.Set(hookapp.HeaderDelivery, id)
		return in.Deliver(ctx, connector.SourceHook, connector.Request{Header: h, Body: b, Slug: slug})
	}
	stamp := func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
	sig := hookapp.Sign([]byte(saved.HookSecret), now.Unix(), body)
	first, err := deliver("deploy", "d-1", stamp(now), sig, body)
	if err != nil || len(first.Runs) != 1 || !first.Runs[0].Created {
		t.Fatalf("first delivery: %+v, %v", first, err)
	}
	e.waitRun(t, first.Runs[0].Run.ID, domain.RunSucceeded)
	for i, v := range []struct{ ts, sig string }{{stamp(now), sig}, {" " + stamp(now), " " + sig}, {stamp(now), "v1=00, " + sig},
		{stamp(now) + " ", sig + ",v1=ff"}, {"0" + stamp(now), sig}} {
		again, err := deliver("deploy", "d-"+strconv.Itoa(i+2), v.ts, v.sig, body)
		if err != nil || !again.Duplicate || len(again.Runs) != 1 || again.Runs[0].Created || again.Runs[0].Run.ID != first.Runs[0].Run.ID {
			t.Fatalf("the same signed request, variant %d: %+v, %v", i, again, err)
		}
	}
	forged := []byte(`{"ref":"evil"}`)
	old := now.Add(-6 * time.Minute)
	for name, d := range map[string][]string{
		"forged":       {"deploy", stamp(now), sig, string(forged)},
		"stale":        {"deploy", stamp(old), hookapp.Sign([]byte(saved.HookSecret), old.Unix(), body), string(body)},
		"unknown hook": {"nope", stamp(now), sig, string(body)},
		"unsigned":     {"deploy", stamp(now), "", string(body)},
	} {
		if _, err := deliver(d[0], "d-x", d[1], d[2], []byte(d[3])); !errors.Is(err, connector.ErrBadSignature) {
			t.Errorf("%s delivery: %v, want ErrBadSignature", name, err)
		}
	}
	if got := effects(t, e.tasks.log); !slices.Equal(got, []string{"start_dev_deploy_v1.2_to_prod"}) {
		t.Fatalf("effects %v", got)
	}
	if runs, _ := e.st.ListRuns(ctx, saved.Automation.ID, "", 10); len(runs) != 1 {
		t.Fatalf("%d runs of one signed body", len(runs))
	}
	if _, err := e.r.SetEnabled(ctx, domain.FirstOrg, "deploy", false); err != nil {
		t.Fatal(err)
	}
	other := []byte(`{"ref":"v1.3"}`)
	if _, err := deliver("deploy", "d-9", stamp(now), hookapp.Sign([]byte(saved.HookSecret), now.Unix(), other), other); !errors.Is(err, domain.ErrNotActive) {
		t.Fatalf("a delivery to a disabled hook: %v", err)
	}
	rotated, err := e.r.RotateHookSecret(ctx, domain.FirstOrg, "deploy")
	if err != nil || rotated.HookSecret == saved.HookSecret {
		t.Fatalf("rotate: %v", err)
	}
}

const scheduled = `
name: nightly
trigger: {kind: schedule, cron: "*/5 * * * *", time_zone: Europe/Paris}
blocks:
  - {id: task, kind: start_task, profile: dev, prompt: "tidy at {{trigger.scheduled_at}}"}
`

// TestScheduleOncePerOccurrence: two replicas on one Postgres database
// check the same schedule over overlapping windows of a fake clock; each
// occurrence runs once.
func TestScheduleOncePerOccurrence(t *testing.T) {
	t.Parallel()
	d := databases(t)[1]
	ft := newFakeTasks(t, "")
	a := newEnv(t, d, "replica-a", ft)
	b := newEnv(t, d, "replica-b", ft)
	ctx := t.Context()
	if _, err := a.r.CreateAutomation(ctx, domain.FirstOrg, []byte(scheduled), true); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 29, 0, 58, 0, 0, time.UTC) // across Paris's switch to summer time
	var wg sync.WaitGroup
	for _, r := range []*Runner{a.r, b.r, a.r, b.r} {
		wg.Go(func() { r.FireSchedules(ctx, t0, t0.Add(30*time.Minute)) })
	}
	wg.Wait()
	b.r.FireSchedules(ctx, t0.Add(20*time.Minute), t0.Add(31*time.Minute))
	runs, err := a.st.ListRuns(ctx, mustAutomation(t, a, "nightly").ID, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, run := range runs {
		keys = append(keys, run.DedupKey)
		a.waitRun(t, run.ID, domain.RunSucceeded)
	}
	slices.Sort(keys)
	want := []string{"schedule:2026-03-29T01:00:00Z", "schedule:2026-03-29T01:05:00Z", "schedule:2026-03-29T01:10:00Z",
		"schedule:2026-03-29T01:15:00Z", "schedule:2026-03-29T01:20:00Z", "schedule:2026-03-29T01:25:00Z"}
	if !slices.Equal(keys, want) {
		t.Fatalf("runs:\n got %v\nwant %v", keys, want)
	}
	if n := len(effects(t, ft.log)); n != len(want) {
		t.Fatalf("%d tasks started for %d occurrences", n, len(want))
	}
}
