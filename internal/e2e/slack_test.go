package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/slackapp"
	"github.com/engrams/engrams/internal/slacktest"
)

const slackSigning = "e2e-signing-secret-0123456789abcdef"

// postSlackEvent sends a Slack-signed Events API request to dev.
func postSlackEvent(t *testing.T, d *dashboardEnv, body []byte, ts time.Time, secret string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, d.dev.url+"/v1/integrations/slack/events", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(slackapp.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(slackapp.HeaderSignature, slackapp.Sign(secret, ts.Unix(), body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// runDevCLI runs the CLI against dev and fails the test on a non-zero exit.
func runDevCLI(t *testing.T, d *dashboardEnv, args ...string) string {
	t.Helper()
	var out, errb syncBuffer
	if code := runCLI(context.Background(), d.dev.url, d.dev.token(t), &out, &errb, args...); code != 0 {
		t.Fatalf("engrams %s: exit %d: %s", strings.Join(args, " "), code, errb.String())
	}
	return out.String()
}

// TestSlackThreadCarriesATask: with Slack configured (a fake Slack built
// from its wire formats) and slack-threads enabled, a signed mention
// starts a real agent (Claude Code on a QEMU guest); its answer appears
// in the thread, one message edited in place, with a recap; a reply in
// the thread continues the same task (the model gets both turns). The
// mention's sender is ada, an engrams member by the email Slack confirmed
// for her: the task is hers. A forged or stale delivery is a 401 and
// starts nothing.
func TestSlackThreadCarriesATask(t *testing.T) {
	t.Parallel()
	d := startDevAgentEnv(t)
	slack := slacktest.Start(t, "xoxb-e2e", "xapp-e2e")
	out := runDevCLI(t, d, "integration", "add", "slack", "--secret", "bot_token=xoxb-e2e", "--secret", "signing_secret="+slackSigning,
		"--api-url", slack.APIURL(), "--default-profile", "agent", "--dashboard-url", d.dev.url)
	if !strings.Contains(out, "installed built-in automation slack-threads") {
		t.Fatalf("integration add printed %q", out)
	}
	runDevCLI(t, d, "automation", "enable", "slack-threads")
	ada, err := d.dev.c.People().AddMember(context.Background(), apiv1.AddMemberRequest{Email: "ada@example.com", Role: "member"})
	if err != nil {
		t.Fatal(err)
	}
	slack.AddUser(slacktest.User{ID: "U1", Email: "ada@example.com", EmailConfirmed: true})
	slack.AddUser(slacktest.User{ID: "U3", Email: "stranger@example.com", EmailConfirmed: true})
	root := slack.Post("C1", "", "<@UBOT> create hello.txt with hi")
	mention := slacktest.Event("Ev-e2e-1", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> create hello.txt with hi",
		"ts": root, "channel": "C1"})
	forged := slacktest.Event("Ev-e2e-2", map[string]string{"type": "app_mention", "user": "U1", "text": "<@UBOT> rm -rf /", "ts": "1.9", "channel": "C1"})
	if st := postSlackEvent(t, d, forged, time.Now(), "not-the-secret"); st != http.StatusUnauthorized {
		t.Fatalf("forged: %d", st)
	}
	if st := postSlackEvent(t, d, mention, time.Now().Add(-10*time.Minute), slackSigning); st != http.StatusUnauthorized {
		t.Fatalf("stale: %d", st)
	}
	for range 2 { // and a retry of it
		if st := postSlackEvent(t, d, mention, time.Now(), slackSigning); st != http.StatusOK {
			t.Fatalf("mention: %d", st)
		}
	}
	eventually(t, 5*time.Minute, "the agent's answer in the thread", func() (bool, string) {
		msgs := slack.Thread("C1", root)
		return len(msgs) >= 2 && strings.Contains(msgs[0].Text, "Created hello.txt") && strings.Contains(msgs[1].Text, "/tasks/"),
			fmt.Sprintf("%+v", msgs)
	})
	first := slack.Thread("C1", root)[0]
	t.Logf("the turn's message: %q, edited %d times: %q", first.Text, len(first.Edits), first.Edits)
	if len(first.Edits) < 1 {
		t.Errorf("the answer was not edited in place as it streamed: %+v", first)
	}
	reply := slack.Post("C1", root, "what did you create?")
	if st := postSlackEvent(t, d, slacktest.Event("Ev-e2e-3", map[string]string{"type": "message", "user": "U1", "text": "what did you create?",
		"ts": reply, "thread_ts": root, "channel": "C1"}), time.Now(), slackSigning); st != http.StatusOK {
		t.Fatalf("reply: %d", st)
	}
	eventually(t, 5*time.Minute, "the second turn's answer in the thread", func() (bool, string) {
		for _, m := range slack.Thread("C1", root) {
			if strings.Contains(m.Text, "Earlier I created hello.txt") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", slack.Thread("C1", root))
	})
	tasks, err := d.dev.c.Tasks().List(context.Background(), "", "")
	if err != nil || len(tasks) != 1 || modelTurns(d, "write") != 1 || modelTurns(d, "followup") < 1 {
		t.Fatalf("%d tasks (%v), model turns write=%d followup=%d: one mention, one task, both turns", len(tasks), err,
			modelTurns(d, "write"), modelTurns(d, "followup"))
	}
	if tasks[0].OwnerID != ada.UserID || tasks[0].Shared {
		t.Errorf("the mention's task: owner %q (shared %v), want ada's (%s), private", tasks[0].OwnerID, tasks[0].Shared, ada.UserID)
	}
	// The second turn's recap follows its answer on a later relay pass.
	eventually(t, time.Minute, "each turn's answer and recap in the thread", func() (bool, string) {
		posts := 0
		for _, m := range slack.Thread("C1", root) {
			if m.Text != "what did you create?" {
				posts++
			}
		}
		return posts == 4, fmt.Sprintf("%d bot messages, want 4: %+v", posts, slack.Thread("C1", root))
	})
	checkSlackRefusals(t, d, slack, root)
}

// checkSlackRefusals: someone else's reply in the thread, a mention
// asking for a profile the channel may not use, and a mention by someone
// who is no engrams member change nothing: each gets a reply saying why,
// and a refused run in the run list.
func checkSlackRefusals(t *testing.T, d *dashboardEnv, slack *slacktest.Server, root string) {
	t.Helper()
	prompts := modelTurns(d, "followup")
	other := slack.Post("C1", root, "delete the repository")
	if st := postSlackEvent(t, d, slacktest.Event("Ev-e2e-4", map[string]string{"type": "message", "user": "U2", "text": "delete the repository",
		"ts": other, "thread_ts": root, "channel": "C1"}), time.Now(), slackSigning); st != http.StatusOK {
		t.Fatalf("another user's reply: %d", st)
	}
	root2 := slack.Post("C1", "", "<@UBOT> [profile=prod-deploy] ship it")
	if st := postSlackEvent(t, d, slacktest.Event("Ev-e2e-5", map[string]string{"type": "app_mention", "user": "U1",
		"text": "<@UBOT> [profile=prod-deploy] ship it", "ts": root2, "channel": "C1"}), time.Now(), slackSigning); st != http.StatusOK {
		t.Fatalf("a mention with another profile: %d", st)
	}
	root3 := slack.Post("C1", "", "<@UBOT> create hello.txt with hi")
	if st := postSlackEvent(t, d, slacktest.Event("Ev-e2e-6", map[string]string{"type": "app_mention", "user": "U3",
		"text": "<@UBOT> create hello.txt with hi", "ts": root3, "channel": "C1"}), time.Now(), slackSigning); st != http.StatusOK {
		t.Fatalf("a stranger's mention: %d", st)
	}
	eventually(t, time.Minute, "the refusals answered in their threads", func() (bool, string) {
		th1, th2, th3 := slack.Thread("C1", root), slack.Thread("C1", root2), slack.Thread("C1", root3)
		ok1 := len(th1) > 0 && strings.Contains(th1[len(th1)-1].Text, "only the person who started this thread can steer its task")
		ok2 := len(th2) == 1 && strings.Contains(th2[0].Text, "may not use profile prod-deploy")
		ok3 := len(th3) == 1 && strings.Contains(th3[0].Text, "not an engrams member") && strings.Contains(th3[0].Text, "engrams member add")
		return ok1 && ok2 && ok3, fmt.Sprintf("%+v / %+v / %+v", th1, th2, th3)
	})
	runs, _, err := d.dev.c.Automations().Runs(context.Background(), "slack-threads", 0)
	refused := 0
	for _, r := range runs {
		if r.State == apiv1.RunRefused {
			refused++
		}
	}
	tasks, _ := d.dev.c.Tasks().List(context.Background(), "", "")
	if err != nil || refused != 3 || len(tasks) != 1 || modelTurns(d, "followup") != prompts {
		t.Fatalf("%d refused runs (%v), %d tasks, followups %d then %d: a refusal changed something", refused, err, len(tasks), prompts,
			modelTurns(d, "followup"))
	}
}
