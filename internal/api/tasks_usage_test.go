package api_test

import (
	"encoding/json"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// TestTaskUsageOnTheWire: a task says its summed usage and exact cost; a
// usage event says its own, read from its data, old float costs included.
func TestTaskUsageOnTheWire(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	u := domain.TurnUsage{Model: "claude-sonnet-4-5", Tokens: domain.Tokens{Input: 2300, Output: 200, CacheRead: 2000, CacheWrite: 100},
		Cost: domain.Money{Micros: 4575, Currency: "USD"}, PriceTable: "engrams-2025-10"}
	a.append(t, "t2",
		domain.TaskEvent{Type: "usage", At: t0, Usage: &u, Payload: json.RawMessage(`{"turn":"u1","model":"claude-sonnet-4-5","input_tokens":2300,` +
			`"output_tokens":200,"cache_read_tokens":2000,"cache_write_tokens":100,"cost":{"micros":4575,"currency":"USD","price_table":"engrams-2025-10"}}`)},
		domain.TaskEvent{Type: "usage", At: t0, Payload: json.RawMessage(`{"input_tokens":10,"output_tokens":2,"cost_usd":0.00010400000000000001}`)})

	rec := a.do("GET", "/v1/tasks/t2", "")
	check(t, "task", rec, 200, []string{`"usage":{"model":"claude-sonnet-4-5","input_tokens":2300,"output_tokens":200,"cache_read_tokens":2000,` +
		`"cache_write_tokens":100,"cost":{"amount":"0.004575","micros":4575,"currency":"USD"}}`}, []string{"unpriced_usages", "run_id"})
	rec = a.do("GET", "/v1/tasks?profile=beta", "")
	check(t, "list", rec, 200, []string{`"cost":{"amount":"0.004575","micros":4575,"currency":"USD"}`}, nil)
	rec = a.do("GET", "/v1/tasks/t3", "")
	check(t, "a task without usage", rec, 200, []string{`"usage":{"input_tokens":0,"output_tokens":0,"cache_read_tokens":0,"cache_write_tokens":0}`}, []string{`"cost"`})

	rec = a.do("GET", "/v1/tasks/t2/events?follow=false", "")
	check(t, "events", rec, 200, []string{
		`"usage":{"model":"claude-sonnet-4-5","input_tokens":2300,"output_tokens":200,"cache_read_tokens":2000,"cache_write_tokens":100,` +
			`"cost":{"amount":"0.004575","micros":4575,"currency":"USD"},"price_table":"engrams-2025-10"}`,
		`"usage":{"input_tokens":10,"output_tokens":2,"cache_read_tokens":0,"cache_write_tokens":0,"cost":{"amount":"0.000104","micros":104,"currency":"USD"},"price_table":"harness"}`,
	}, nil)
	var tk apiv1.Task
	_ = json.Unmarshal(a.do("GET", "/v1/tasks/t2", "").Body.Bytes(), &tk)
	if tk.Usage.Cost == nil || tk.Usage.Cost.Micros != 4575 {
		t.Fatalf("decoded usage %+v", tk.Usage)
	}
}
