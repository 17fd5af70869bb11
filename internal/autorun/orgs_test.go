package autorun

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// slackDef is an enabled Slack automation named name.
func slackDef(name string) []byte {
	return []byte("name: " + name + "\ntrigger: {kind: slack_mention}\nblocks:\n  - {id: task, kind: start_task, profile: dev, prompt: \"{{trigger.text}}\"}\n")
}

// TestAutomationsOfTheirOrganisation: an organisation reaches only its
// own automations and runs (by name, by id, in lists); a Slack event
// starts only the automations of the organisation holding the Slack
// integration, and the run's task is that organisation's.
func TestAutomationsOfTheirOrganisation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, databases(t)[0], "r1", newFakeTasks(t, ""))
	ctx := t.Context()
	mine, err := e.r.CreateAutomation(ctx, domain.FirstOrg, slackDef("first-slack"), true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.r.CreateAutomation(ctx, "org-b", slackDef("b-slack"), true); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"first-slack", string(mine.Automation.ID)} {
		if _, err := e.r.Automation(ctx, "org-b", ref); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("org-b reads the first organisation's automation %s: %v", ref, err)
		}
		if _, err := e.r.SetEnabled(ctx, "org-b", ref, false); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("org-b disables the first organisation's automation %s: %v", ref, err)
		}
	}
	if vs, err := e.r.Automations(ctx, "org-b"); err != nil || len(vs) != 1 || vs[0].Automation.Name != "b-slack" {
		t.Fatalf("org-b's automations = %+v, %v", vs, err)
	}
	// No one holds the Slack integration: an event starts nothing.
	start := connector.Start{Trigger: "slack_mention", Payload: map[string]any{"text": "hi"}}
	if got, err := e.r.StartTriggered(ctx, start, []byte(`{"text":"hi"}`), "ev-0"); err != nil || len(got) != 0 {
		t.Fatalf("an event with no integration started %+v, %v", got, err)
	}
	if _, err := e.st.PutIntegration(ctx, domain.Integration{Kind: domain.IntegrationSlack, Org: domain.FirstOrg, Sealed: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	got, err := e.r.StartTriggered(ctx, start, []byte(`{"text":"hi"}`), "ev-1")
	if err != nil || len(got) != 1 || got[0].Run.AutomationID != mine.Automation.ID || got[0].Run.Org != domain.FirstOrg {
		t.Fatalf("the first organisation's Slack event started %+v, %v", got, err)
	}
	if run := e.waitRun(t, got[0].Run.ID, domain.RunSucceeded, domain.RunFailed); run.State != domain.RunSucceeded {
		t.Fatalf("the run ended %s: %s", run.State, run.Error)
	}
	if _, err := e.r.RunDetail(ctx, "org-b", got[0].Run.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("org-b reads the first organisation's run: %v", err)
	}
	if _, err := e.r.CancelRun(ctx, "org-b", got[0].Run.ID); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("org-b cancels the first organisation's run: %v", err)
	}
	e.tasks.mu.Lock()
	defer e.tasks.mu.Unlock()
	found := 0
	for _, tk := range e.tasks.tasks {
		if tk.RunID == got[0].Run.ID {
			found++
			if tk.Owner != (domain.Owner{OrgID: domain.FirstOrg, Shared: true}) {
				t.Errorf("the run's task is owned by %+v, want the first organisation's", tk.Owner)
			}
		}
	}
	if found != 1 {
		t.Errorf("the run started %d tasks, want 1", found)
	}
}

// TestRunsByHandHoldTheirStartersGrants: a task a run started by hand is
// started with its starter's grants (their groups; a curator's when they
// are an admin), so the run's inputs name no profile the starter may not
// use; a run by a person who is no longer a member starts nothing.
func TestRunsByHandHoldTheirStartersGrants(t *testing.T) {
	t.Parallel()
	e := newEnv(t, databases(t)[0], "r1", newFakeTasks(t, ""))
	ctx := t.Context()
	def := "name: by-hand\ntrigger: {kind: manual}\ninputs:\n  - {name: profile, type: string, required: true}\n" +
		"blocks:\n  - {id: task, kind: start_task, profile: \"{{inputs.profile}}\", prompt: go}\n"
	if _, err := e.r.CreateAutomation(ctx, domain.FirstOrg, []byte(def), false); err != nil {
		t.Fatal(err)
	}
	for _, u := range []domain.UserID{"u-mem", "u-adm", "u-gone"} {
		if err := e.st.CreateUser(ctx, domain.User{ID: u}); err != nil {
			t.Fatal(err)
		}
	}
	for u, role := range map[domain.UserID]domain.Role{"u-mem": domain.RoleMember, "u-adm": domain.RoleAdmin} {
		if err := e.st.PutMember(ctx, domain.FirstOrg, u, role, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.SetMemberGroups(ctx, domain.FirstOrg, "u-mem", []string{"eng"}); err != nil {
		t.Fatal(err)
	}
	for actor, want := range map[domain.UserID]domain.Grantee{
		"u-mem": {OrgID: domain.FirstOrg, UserID: "u-mem", Groups: []string{"eng"}},
		"u-adm": {OrgID: domain.FirstOrg, UserID: "u-adm", Groups: []string{}, Curator: true},
	} {
		s, err := e.r.StartRun(ctx, domain.FirstOrg, "by-hand", RunRequest{Inputs: map[string]any{"profile": "prod"}, Actor: actor})
		if err != nil {
			t.Fatal(err)
		}
		if run := e.waitRun(t, s.Run.ID, domain.RunSucceeded, domain.RunFailed); run.State != domain.RunSucceeded {
			t.Fatalf("%s's run ended %s: %s", actor, run.State, run.Error)
		}
		e.tasks.mu.Lock()
		var got []domain.Grantee
		for id, tk := range e.tasks.tasks {
			if tk.RunID == s.Run.ID {
				got = append(got, e.tasks.grantees[id])
			}
		}
		e.tasks.mu.Unlock()
		if len(got) != 1 || got[0].OrgID != want.OrgID || got[0].UserID != want.UserID || got[0].Curator != want.Curator ||
			len(got[0].Groups) != len(want.Groups) {
			t.Errorf("%s's run started its task as %+v, want %+v", actor, got, want)
		}
	}
	s, err := e.r.StartRun(ctx, domain.FirstOrg, "by-hand", RunRequest{Inputs: map[string]any{"profile": "prod"}, Actor: "u-gone"})
	if err != nil {
		t.Fatal(err)
	}
	if run := e.waitRun(t, s.Run.ID, domain.RunSucceeded, domain.RunFailed); run.State != domain.RunFailed || !strings.Contains(run.Error, "no longer a member") {
		t.Errorf("a former member's run ended %s: %s", run.State, run.Error)
	}
}
