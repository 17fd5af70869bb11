package connectortest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/intake"
)

// Deliveries remembers deliveries in memory, as the store does.
type Deliveries struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

// RecordDelivery implements intake.Deliveries.
func (d *Deliveries) RecordDelivery(_ context.Context, source, key string, at, expires time.Time) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen == nil {
		d.seen = map[string]time.Time{}
	}
	for k, exp := range d.seen {
		if exp.Before(at) {
			delete(d.seen, k)
		}
	}
	k := source + "\x00" + key
	if _, ok := d.seen[k]; ok {
		return false, nil
	}
	d.seen[k] = expires
	return true, nil
}

// ForgetDelivery implements intake.Deliveries.
func (d *Deliveries) ForgetDelivery(_ context.Context, source, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.seen, source+"\x00"+key)
	return nil
}

// Started is one run a delivery started or recorded.
type Started struct {
	Trigger string
	Payload map[string]any
	Key     string
	Refused string // why it was refused ("" for a run that runs)
	Actor   domain.UserID
}

// Runs stands for the automations of a deployment: one enabled
// automation per trigger listed, each taking what its trigger admits; it
// records runs once per key and automation, as autorun does.
type Runs struct {
	Triggers map[string]connector.Trigger // trigger kind -> the one automation's trigger
	mu       sync.Mutex
	runs     []Started
	byKey    map[string]domain.AutomationRun
}

// StartTriggered implements intake.Runs.
func (r *Runs) StartTriggered(_ context.Context, s connector.Start, payload json.RawMessage, key string) ([]connector.Started, error) {
	t, ok := r.Triggers[s.Trigger]
	if !ok {
		return nil, nil
	}
	admit := s.Admit
	if admit == nil {
		admit = connector.Admit
	}
	a := admit(t)
	if !a.Match {
		return nil, nil
	}
	st := r.record(s.Trigger, payload, key, a.Refused)
	r.mu.Lock()
	if st.Created {
		r.runs[len(r.runs)-1].Actor = s.Actor
	}
	r.mu.Unlock()
	return []connector.Started{st}, nil
}

// RecordRefusal implements intake.Runs.
func (r *Runs) RecordRefusal(_ context.Context, ref connector.Refusal, payload json.RawMessage, key string) (connector.Started, error) {
	return r.record("refusal of "+string(ref.Run), payload, key, ref.Reason), nil
}

func (r *Runs) record(trigger string, payload json.RawMessage, key, refused string) connector.Started {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byKey == nil {
		r.byKey = map[string]domain.AutomationRun{}
	}
	if run, ok := r.byKey[trigger+"\x00"+key]; ok {
		return connector.Started{Run: run}
	}
	var p map[string]any
	_ = json.Unmarshal(payload, &p)
	run := domain.AutomationRun{ID: domain.AutomationRunID(fmt.Sprintf("run-%d", len(r.runs)+1)), TriggerKind: trigger, DedupKey: key,
		Trigger: payload, State: domain.RunQueued}
	if refused != "" {
		run.State, run.Error = domain.RunRefused, "refused: "+refused
	}
	r.byKey[trigger+"\x00"+key] = run
	r.runs = append(r.runs, Started{Trigger: trigger, Payload: p, Key: key, Refused: refused})
	return connector.Started{Run: run, Created: true}
}

// RunOfDelivery implements intake.Runs.
func (r *Runs) RunOfDelivery(_ context.Context, _ domain.AutomationID, key string) (domain.AutomationRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.byKey {
		if run.DedupKey == key {
			return run, nil
		}
	}
	return domain.AutomationRun{}, domain.ErrNotFound
}

// Runs are the runs recorded so far, in order.
func (r *Runs) Runs() []Started {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Started(nil), r.runs...)
}

// Pipeline is the real delivery pipeline over rcv, in-memory deliveries
// and runs.
func Pipeline(t testing.TB, runs *Runs, now func() time.Time, rcv ...connector.Receiver) *intake.Pipeline {
	t.Helper()
	p, err := intake.New(intake.Config{}, intake.Deps{Receivers: rcv, Deliveries: &Deliveries{}, Runs: runs, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Deliver sends one delivery through p.
func Deliver(t testing.TB, p *intake.Pipeline, src connector.Source, h http.Header, body []byte) (intake.Outcome, error) {
	t.Helper()
	return p.Deliver(t.Context(), src, connector.Request{Header: h, Body: body})
}
