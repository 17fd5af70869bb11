package linearapp

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/lineartest"
	"github.com/engrams/engrams/internal/secret"
	"github.com/engrams/engrams/internal/store"
)

const hookSecret = "lin-webhook-secret"

func newApp(t *testing.T) (*App, *lineartest.Server) {
	t.Helper()
	a, lin, _ := newAppWithStore(t)
	return a, lin
}

// newAppWithStore is newApp with its store, which keeps its people.
func newAppWithStore(t *testing.T) (*App, *lineartest.Server, store.Store) {
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
	if _, err := ins.Add(t.Context(), domain.FirstOrg, domain.IntegrationLinear, cfg, map[string]string{"api_key": "lin_api_key", "webhook_secret": hookSecret}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Deps{Settings: ins, People: st, HTTP: &http.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	return a, lin, st
}

func signed(body []byte, _ time.Time, forged bool) http.Header {
	h := http.Header{}
	h.Set(HeaderSignature, Sign(map[bool]string{false: hookSecret, true: "wrong"}[forged], body))
	h.Set(HeaderDelivery, "d1")
	return h
}

var engramsLabel = connector.Trigger{Labels: []string{"engrams"}}

// TestConformance: Linear's deliveries pass the integration seam's suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	a, _ := newApp(t)
	now := time.Now()
	connectortest.Run(t, connectortest.Case{Receiver: a, TriggerKind: TriggerIssue, Trigger: engramsLabel, Now: now, Sign: signed,
		Body: lineartest.IssueEvent("create", "iss-3", map[string]string{"l2": "engrams"}, nil, now), Variants: []func(http.Header){
			func(h http.Header) { h.Set(HeaderDelivery, "d2") },
			func(h http.Header) { h.Del(HeaderDelivery) },
			func(h http.Header) { h.Set(HeaderSignature, " "+h.Get(HeaderSignature)) },
			func(h http.Header) { h.Set("Linear-Event", "Comment") },
		}})
}

// TestIssueDeliveries: an issue labelled engrams starts a run, once per
// signed body; forged and stale deliveries, other labels and label
// removals start nothing.
func TestIssueDeliveries(t *testing.T) {
	t.Parallel()
	a, _ := newApp(t)
	runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{TriggerIssue: engramsLabel}}
	p := connectortest.Pipeline(t, runs, time.Now, a)
	now := time.Now()
	labelled := lineartest.IssueEvent("update", "iss-1", map[string]string{"l1": "bug", "l2": "engrams"}, []string{"l1"}, now)
	for _, c := range []struct {
		name, id string
		body     []byte
		secret   string
		ok       bool
	}{
		{"labelled", "d1", labelled, hookSecret, true},
		{"replayed under another id", "d1b", labelled, hookSecret, true},
		{"forged", "d2", labelled, "wrong", false},
		{"stale", "d3", lineartest.IssueEvent("update", "iss-1", map[string]string{"l2": "engrams"}, []string{}, now.Add(-5*time.Minute)), hookSecret, false},
		{"other label", "d4", lineartest.IssueEvent("update", "iss-2", map[string]string{"l1": "bug"}, []string{}, now), hookSecret, true},
		{"already labelled", "d5", lineartest.IssueEvent("update", "iss-1", map[string]string{"l2": "engrams"}, []string{"l2"}, now), hookSecret, true},
		{"created with the label", "d6", lineartest.IssueEvent("create", "iss-3", map[string]string{"l2": "engrams"}, nil, now), hookSecret, true},
	} {
		h := http.Header{}
		h.Set(HeaderSignature, Sign(c.secret, c.body))
		h.Set(HeaderDelivery, c.id)
		if _, err := connectortest.Deliver(t, p, connector.SourceLinear, h, c.body); (err == nil) != c.ok {
			t.Errorf("%s: %v, want ok %v", c.name, err, c.ok)
		}
	}
	// Linear's retry of the first: the same change, stamped anew.
	retry := lineartest.IssueEvent("update", "iss-1", map[string]string{"l1": "bug", "l2": "engrams"}, []string{"l1"}, now.Add(30*time.Second))
	h := http.Header{}
	h.Set(HeaderSignature, Sign(hookSecret, retry))
	if out, err := connectortest.Deliver(t, p, connector.SourceLinear, h, retry); err != nil || !out.Duplicate {
		t.Fatalf("a retry stamped anew: %+v %v", out, err)
	}
	got := runs.Runs()
	if len(got) != 2 || got[0].Payload["issue"] != "iss-1" || got[0].Payload["event"] != "labelled" || got[0].Payload["profile"] != "agent" ||
		got[1].Payload["issue"] != "iss-3" {
		t.Fatalf("runs: %+v", got)
	}
}

func TestCommentOnce(t *testing.T) {
	t.Parallel()
	a, lin := newApp(t)
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
