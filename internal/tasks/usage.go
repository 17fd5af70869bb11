package tasks

import (
	"encoding/json"
	"math"
	"unicode"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/pricing"
)

// HarnessPriceTable is the PriceTable of a cost the harness reckoned
// itself (a model the coordinator's table does not have).
const HarnessPriceTable = "harness"

// maxHarnessCostUSD bounds a cost a harness reports for one usage event.
const maxHarnessCostUSD = 1_000_000

// maxModelName bounds the model name a usage event keeps.
const maxModelName = 128

// usagePayload is a usage event as stored: the guest's counts as read,
// and the cost the coordinator gives them.
type usagePayload struct {
	Turn             string       `json:"turn,omitempty"`
	Model            string       `json:"model,omitempty"`
	InputTokens      int64        `json:"input_tokens"`
	OutputTokens     int64        `json:"output_tokens"`
	CacheReadTokens  int64        `json:"cache_read_tokens"`
	CacheWriteTokens int64        `json:"cache_write_tokens"`
	Cost             *costPayload `json:"cost,omitempty"`
	// CostUSD is the harness's float, in events stored before costs were
	// exact; read, never written.
	CostUSD float64 `json:"cost_usd,omitempty"`
}

type costPayload struct {
	Micros     int64  `json:"micros"`
	Currency   string `json:"currency"`
	PriceTable string `json:"price_table"`
}

// priceUsage turns a guest's usage event (as guestTaskEvent stored it)
// into what the task keeps: counts within [0, pricing.MaxTokens], a
// printable model name, and a cost from prices when it has the model,
// else the harness's own (in USD, "harness"), else none. The guest is not
// trusted: what it says is bounded, and a payload that is not a usage
// stays as it is, adding nothing to the task.
func priceUsage(e *domain.TaskEvent, prices pricing.Table) {
	var in struct {
		Turn string `json:"turn"`
		guestapi.UsageData
	}
	if e.Type != guestapi.EventUsage || json.Unmarshal(e.Payload, &in) != nil {
		return
	}
	u := domain.TurnUsage{Model: modelName(in.Model), Tokens: domain.Tokens{
		Input: tokens(in.InputTokens), Output: tokens(in.OutputTokens),
		CacheRead: tokens(in.CacheReadTokens), CacheWrite: tokens(in.CacheWriteTokens)}}
	if cost, ok := prices.Price(u.Model, u.Tokens); ok {
		u.Cost, u.PriceTable = cost, prices.ID
	} else if in.CostUSD > 0 {
		u.Cost, u.PriceTable = harnessCost(in.CostUSD), HarnessPriceTable
	}
	p := usagePayload{Turn: in.Turn, Model: u.Model, InputTokens: u.Tokens.Input, OutputTokens: u.Tokens.Output,
		CacheReadTokens: u.Tokens.CacheRead, CacheWriteTokens: u.Tokens.CacheWrite}
	if u.Cost.Currency != "" {
		p.Cost = &costPayload{Micros: u.Cost.Micros, Currency: u.Cost.Currency, PriceTable: u.PriceTable}
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return
	}
	e.Payload, e.Usage = raw, &u
}

// harnessCost is a cost a harness reckoned in dollars (a float), as exact
// micro-dollars, at most maxHarnessCostUSD.
func harnessCost(usd float64) domain.Money {
	return domain.Money{Micros: int64(math.Round(min(usd, maxHarnessCostUSD) * 1e6)), Currency: "USD"}
}

func tokens(n int64) int64 { return min(max(n, 0), pricing.MaxTokens) }

// modelName is a guest's model name when it is short and printable, else "".
func modelName(s string) string {
	if len(s) > maxModelName || !utf8.ValidString(s) {
		return ""
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return ""
		}
	}
	return s
}

// UsageOf reads a stored usage event: its usage, and whether it is one.
// Events stored before costs were exact say the harness's cost as a float
// (cost_usd): it is read as micro-dollars reckoned by the harness.
func UsageOf(e domain.TaskEvent) (domain.TurnUsage, bool) {
	var p usagePayload
	if e.Type != guestapi.EventUsage || json.Unmarshal(e.Payload, &p) != nil {
		return domain.TurnUsage{}, false
	}
	u := domain.TurnUsage{Model: p.Model, Tokens: domain.Tokens{Input: p.InputTokens, Output: p.OutputTokens,
		CacheRead: p.CacheReadTokens, CacheWrite: p.CacheWriteTokens}}
	switch {
	case p.Cost != nil:
		u.Cost, u.PriceTable = domain.Money{Micros: p.Cost.Micros, Currency: p.Cost.Currency}, p.Cost.PriceTable
	case p.CostUSD > 0:
		u.Cost, u.PriceTable = harnessCost(p.CostUSD), HarnessPriceTable
	}
	return u, true
}
