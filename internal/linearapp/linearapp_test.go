package linearapp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/lineartest"
	"github.com/engrams/engrams/internal/secret"
)

const hookSecret = "lin-webhook-secret"

type fakeRuns struct {
	mu    sync.Mutex
	calls []map[string]any
}

func (f *fakeRuns) StartTriggered(_ context.Context, kind automations.TriggerKind, match func(automations.Trigger) bool, req autorun.RunRequest) ([]autorun.Started, error) {
	if kind != automations.TriggerLinearIssue || !match(automations.Trigger{Kind: kind, Labels: []string{"engrams"}}) {
		return nil, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var p map[string]any
	_ = json.Unmarshal(req.Trigger, &p)
	f.calls = append(f.calls, p)
	return []autorun.Started{{Created: true}}, nil
}

func newApp(t *testing.T) (*App, *lineartest.Server, *fakeRuns) {
	t.Helper()
	st := coordinatortest.NewStore(t)
	sealer, err := secret.NewEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	ins, err := integrations.New(integrations.Deps{Store: st, Sealer: sealer})
	if err != nil {
		t.Fatal(err)
	}
	lin := lineartest.Start(t, "lin_api_key")
	cfg, _ := json.Marshal(map[string]any{"api_url": lin.APIURL(), "profile": "agent"})
	if _, err := ins.Add(t.Context(), domain.IntegrationLinear, cfg, map[string]string{"api_key": "lin_api_key", "webhook_secret": hookSecret}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Deps{Store: st, Integrations: ins})
	if err != nil {
		t.Fatal(err)
	}
	runs := &fakeRuns{}
	a.SetRuns(runs)
	return a, lin, runs
}

func deliver(t *testing.T, a *App, id string, body []byte, secret string) int {
	t.Helper()
	h := http.Header{}
	h.Set(HeaderSignature, Sign(secret, body))
	h.Set(HeaderDelivery, id)
	st, _ := a.HandleEvents(t.Context(), h, body)
	return st
}

// TestIssueDeliveries: an issue labelled engrams starts a run, once per
// delivery; forged and stale deliveries, other labels and label removals
// start nothing.
func TestIssueDeliveries(t *testing.T) {
	t.Parallel()
	a, _, runs := newApp(t)
	now := time.Now()
	labelled := lineartest.IssueEvent("update", "iss-1", map[string]string{"l1": "bug", "l2": "engrams"}, []string{"l1"}, now)
	for _, c := range []struct {
		name, id string
		body     []byte
		secret   string
		status   int
	}{
		{"labelled", "d1", labelled, hookSecret, 200},
		{"replayed", "d1", labelled, hookSecret, 200},
		{"forged", "d2", labelled, "wrong", 401},
		{"stale", "d3", lineartest.IssueEvent("update", "iss-1", map[string]string{"l2": "engrams"}, []string{}, now.Add(-5*time.Minute)), hookSecret, 401},
		{"other label", "d4", lineartest.IssueEvent("update", "iss-2", map[string]string{"l1": "bug"}, []string{}, now), hookSecret, 200},
		{"already labelled", "d5", lineartest.IssueEvent("update", "iss-1", map[string]string{"l2": "engrams"}, []string{"l2"}, now), hookSecret, 200},
		{"created with the label", "d6", lineartest.IssueEvent("create", "iss-3", map[string]string{"l2": "engrams"}, nil, now), hookSecret, 200},
	} {
		if st := deliver(t, a, c.id, c.body, c.secret); st != c.status {
			t.Errorf("%s: %d, want %d", c.name, st, c.status)
		}
	}
	if len(runs.calls) != 2 || runs.calls[0]["issue"] != "iss-1" || runs.calls[0]["event"] != "labelled" || runs.calls[0]["profile"] != "agent" ||
		runs.calls[1]["issue"] != "iss-3" {
		t.Fatalf("runs: %v", runs.calls)
	}
}

func TestCommentOnce(t *testing.T) {
	t.Parallel()
	a, lin, _ := newApp(t)
	for range 2 {
		if _, err := a.Comment(t.Context(), "iss-1", "Done: https://github.test/acme/app/pull/9", "step/run-1/4"); err != nil {
			t.Fatal(err)
		}
	}
	cs := lin.Comments("iss-1")
	if len(cs) != 1 || !strings.HasPrefix(cs[0], "Done: https://github.test/acme/app/pull/9") {
		t.Fatalf("comments %q", cs)
	}
}

func FuzzDelivery(f *testing.F) {
	f.Add([]byte(`{"action":"create","type":"Issue","data":{"labels":[{"id":"a","name":"engrams"}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var d delivery
		if json.Unmarshal(body, &d) != nil {
			return
		}
		ev, labels := d.event()
		if ev == "" && len(labels) > 0 {
			t.Fatalf("no event but labels %v", labels)
		}
		if len(labels) > len(d.Data.Labels) {
			t.Fatalf("more labels than the issue has")
		}
	})
}
