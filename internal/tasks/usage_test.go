package tasks

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/pricing"
)

// TestIngestPricesUsage: a guest's usage events are stored with exact
// costs from the coordinator's table (or the harness's own reckoning for a
// model it lacks), bounded where a guest lies, and summed into the task.
func TestIngestPricesUsage(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("m", maxModelName+1)
	tests := []struct {
		name, data string
		want       string // the stored payload
	}{
		{"priced by the table", `{"model":"claude-sonnet-4-5","input_tokens":2300,"output_tokens":200,"cache_read_tokens":2000,"cache_write_tokens":100,"cost_usd":9.99}`,
			`{"turn":"u","model":"claude-sonnet-4-5","input_tokens":2300,"output_tokens":200,"cache_read_tokens":2000,"cache_write_tokens":100,"cost":{"micros":4575,"currency":"USD","price_table":"engrams-2025-10"}}`},
		{"the harness's reckoning", `{"model":"claude-opus-5-5","input_tokens":25089,"output_tokens":25,"cost_usd":0.10081999999999999}`,
			`{"turn":"u","model":"claude-opus-5-5","input_tokens":25089,"output_tokens":25,"cache_read_tokens":0,"cache_write_tokens":0,"cost":{"micros":100820,"currency":"USD","price_table":"harness"}}`},
		{"not priced", `{"input_tokens":7,"output_tokens":1}`,
			`{"turn":"u","input_tokens":7,"output_tokens":1,"cache_read_tokens":0,"cache_write_tokens":0}`},
		{"a lying guest", `{"model":"` + long + `","input_tokens":-4,"output_tokens":99999999999999,"cost_usd":1e300}`,
			`{"turn":"u","input_tokens":0,"output_tokens":1000000000,"cache_read_tokens":0,"cache_write_tokens":0,"cost":{"micros":1000000000000,"currency":"USD","price_table":"harness"}}`},
		{"a control character in the model", `{"model":"gpt-5\u001b[2J","input_tokens":1}`,
			`{"turn":"u","input_tokens":1,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}`},
		{"not a usage", `{"input_tokens":"many"}`, `{"input_tokens":"many","turn":"u"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
			e.task(t, "t1", "s1", "", "")
			ev := guestapi.HarnessEvent{Seq: 1, Type: guestapi.EventUsage, Turn: "u", At: taskT0, Data: json.RawMessage(tt.data)}
			if rec := postEvents(t, e.hostLink(), "host-a", "s1", hostlink.HarnessEventsRequest{Epoch: s.Epoch, Events: []guestapi.HarnessEvent{ev}}); rec.Code != http.StatusOK {
				t.Fatalf("post: %d %s", rec.Code, rec.Body)
			}
			evs := e.events(t, "t1")
			if len(evs) != 1 || string(evs[0].Payload) != tt.want {
				t.Fatalf("stored %s\nwant   %s", evs[0].Payload, tt.want)
			}
			task, err := e.st.GetTask(context.Background(), "t1")
			if err != nil {
				t.Fatal(err)
			}
			u, ok := UsageOf(evs[0])
			if !ok {
				if tt.name != "not a usage" || task.Usage != (domain.TaskUsage{}) {
					t.Fatalf("UsageOf refused %s; task usage %+v", evs[0].Payload, task.Usage)
				}
				return
			}
			want := domain.TaskUsage{Model: u.Model, Tokens: u.Tokens, Cost: u.Cost}
			if u.Cost.Currency == "" {
				want.Unpriced = 1
			}
			if task.Usage != want {
				t.Fatalf("task usage %+v, want %+v (the event's %+v)", task.Usage, want, u)
			}
		})
	}
}

// TestUsageOf reads usage events as stored now and before costs were exact.
func TestUsageOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, typ, payload string
		want               domain.TurnUsage
		ok                 bool
	}{
		{"exact", guestapi.EventUsage, `{"model":"gpt-5","input_tokens":3,"output_tokens":2,"cache_read_tokens":1,"cost":{"micros":21,"currency":"USD","price_table":"engrams-2025-10"}}`,
			domain.TurnUsage{Model: "gpt-5", Tokens: domain.Tokens{Input: 3, Output: 2, CacheRead: 1}, Cost: domain.Money{Micros: 21, Currency: "USD"}, PriceTable: pricing.BuiltinID}, true},
		{"a float from before", guestapi.EventUsage, `{"input_tokens":10,"output_tokens":2,"cost_usd":0.00010400000000000001}`,
			domain.TurnUsage{Tokens: domain.Tokens{Input: 10, Output: 2}, Cost: domain.Money{Micros: 104, Currency: "USD"}, PriceTable: HarnessPriceTable}, true},
		{"no cost", guestapi.EventUsage, `{"input_tokens":10}`, domain.TurnUsage{Tokens: domain.Tokens{Input: 10}}, true},
		{"another event", guestapi.EventIdle, `{"input_tokens":10}`, domain.TurnUsage{}, false},
		{"not JSON", guestapi.EventUsage, `[`, domain.TurnUsage{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := UsageOf(domain.TaskEvent{Type: tt.typ, Payload: json.RawMessage(tt.payload)})
			if ok != tt.ok || got != tt.want {
				t.Fatalf("UsageOf = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}
