package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// countMetrics counts QuotaRefused by quota.
type countMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countMetrics) QuotaRefused(q string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[q]++
}

func (m *countMetrics) got() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]int{}
	for k, v := range m.n {
		out[k] = v
	}
	return out
}

// quotaStep is one thing that happens to task t1 (session s1 on host-a,
// idle) in a quota case: a post of events (and rewound_to) answered with
// cursor, a user's follow-up, the clock moving.
type quotaStep struct {
	events  []guestapi.HarnessEvent
	rewound *int64
	cursor  int64
	prompt  string
	advance time.Duration
}

type quotaCase struct {
	name        string
	q           Quotas
	steps       []quotaStep
	wantGuest   []string       // the text of each guest event stored, in order
	wantNotes   map[string]int // quota notes by quota
	wantRefused map[string]int // Metrics.QuotaRefused by quota
	wantPrompts int
}

// post is a step posting guest events from..to (texts "<tag><seq>").
func post(tag string, from, to, cursor int64) quotaStep {
	return quotaStep{events: hevs(guestapi.EventAssistantText, tag, from, to), cursor: cursor}
}

// texts are the texts "<tag><seq>" of seqs from..to.
func texts(tag string, from, to int64) []string {
	var out []string
	for s := from; s <= to; s++ {
		out = append(out, fmt.Sprintf("%s%d", tag, s))
	}
	return out
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func quotaCountCases() []quotaCase {
	return []quotaCase{
		{name: "events: the task's count drops the guest's excess, noted once, acknowledged",
			q: Quotas{MaxEvents: 5},
			steps: []quotaStep{post("a", 1, 8, 8), post("b", 9, 10, 10),
				{prompt: "a prompt over the quota is taken"}, post("c", 11, 11, 11)},
			wantGuest: texts("a", 1, 5), wantNotes: map[string]int{store.QuotaEvents: 1},
			wantRefused: map[string]int{store.QuotaEvents: 6}, wantPrompts: 1},
		{name: "events: the user's prompts count toward it",
			q:         Quotas{MaxEvents: 4},
			steps:     []quotaStep{{prompt: "one"}, {prompt: "two"}, post("a", 1, 3, 3)},
			wantGuest: texts("a", 1, 2), wantNotes: map[string]int{store.QuotaEvents: 1},
			wantRefused: map[string]int{store.QuotaEvents: 1}, wantPrompts: 2},
		{name: "bytes: the task's size drops the guest's excess, noted once",
			// each event: "assistant_text" and {"text":"a1","turn":"u"}
			q:         Quotas{MaxBytes: 3 * int64(len(guestapi.EventAssistantText)+len(`{"text":"a1","turn":"u"}`))},
			steps:     []quotaStep{post("a", 1, 5, 5), post("b", 6, 6, 6), {prompt: "still taken"}},
			wantGuest: texts("a", 1, 3), wantNotes: map[string]int{store.QuotaBytes: 1},
			wantRefused: map[string]int{store.QuotaBytes: 3}, wantPrompts: 1},
		{name: "no quota is hit", steps: []quotaStep{post("a", 1, 30, 30)}, wantGuest: texts("a", 1, 30)},
		{name: "resent events count toward no quota", q: Quotas{MaxEvents: 3},
			steps: []quotaStep{post("a", 1, 3, 3), post("a", 1, 3, 3), post("a", 2, 3, 3)}, wantGuest: texts("a", 1, 3)},
	}
}

func quotaTimeCases() []quotaCase {
	rate := Quotas{Rate: 10, Burst: 20}
	return []quotaCase{
		{name: "rate: a burst, then the rate, on the clock; one note an hour",
			q: rate,
			steps: []quotaStep{post("a", 1, 50, 50), post("b", 51, 60, 60), {advance: time.Second}, post("c", 61, 80, 80),
				{prompt: "taken at any rate"}, {advance: time.Hour}, post("d", 81, 130, 130)},
			wantGuest:   cat(texts("a", 1, 20), texts("c", 61, 70), texts("d", 81, 100)),
			wantNotes:   map[string]int{store.QuotaRate: 2},
			wantRefused: map[string]int{store.QuotaRate: 30 + 10 + 10 + 30}, wantPrompts: 1},
		{name: "rate: events within it are all taken",
			q:         rate,
			steps:     []quotaStep{post("a", 1, 20, 20), {advance: 2 * time.Second}, post("b", 21, 40, 40)},
			wantGuest: cat(texts("a", 1, 20), texts("b", 21, 40))},
		{name: "rewinds: a guest rewinding in a loop is stopped; one note an hour",
			q: Quotas{MaxRewinds: 2},
			steps: []quotaStep{post("a", 1, 3, 3),
				{rewound: ptr[int64](0), cursor: 0}, post("b", 1, 3, 3),
				{rewound: ptr[int64](0), cursor: 0}, post("c", 1, 3, 3),
				{rewound: ptr[int64](0), cursor: 3}, post("d", 1, 3, 3), // refused: the repeats are dropped
				{rewound: ptr[int64](1), cursor: 3}, post("e", 1, 4, 4),
				{advance: time.Hour}, {rewound: ptr[int64](2), cursor: 2}, post("f", 3, 4, 4), // a new window
				{rewound: ptr[int64](0), cursor: 0}, post("g", 1, 4, 4),
				{rewound: ptr[int64](0), cursor: 4}}, // refused again, noted again an hour after the first note
			wantGuest: cat(texts("a", 1, 3), texts("b", 1, 3), texts("c", 1, 3), texts("e", 4, 4), texts("f", 3, 4), texts("g", 1, 4)),
			wantNotes: map[string]int{QuotaRewinds: 2}, wantRefused: map[string]int{QuotaRewinds: 3}},
		{name: "event size: every field counts; the event keeps a note of its size",
			q: Quotas{MaxEventBytes: 100},
			steps: []quotaStep{{events: []guestapi.HarnessEvent{
				{Seq: 1, Type: guestapi.EventAssistantText, Turn: "u", At: taskT0, Data: json.RawMessage(`{"text":"fits"}`)},
				{Seq: 2, Type: guestapi.EventAssistantText, Turn: "u", At: taskT0, Data: json.RawMessage(`{"text":"` + strings.Repeat("d", 100) + `"}`)},
				{Seq: 3, Type: guestapi.EventAssistantText, Turn: strings.Repeat("t", 100), At: taskT0, Data: json.RawMessage(`{"text":"x"}`)},
				{Seq: 4, Type: guestapi.EventAssistantText, Turn: strings.Repeat("t", 40), At: taskT0, Data: json.RawMessage(`{"text":"` + strings.Repeat("d", 40) + `"}`)},
			}, cursor: 4}},
			wantGuest: []string{"fits", "", "", ""}, wantRefused: map[string]int{QuotaEventSize: 3}},
	}
}

// TestIngestQuotas runs each quota through the host-link handler: the
// excess is dropped and acknowledged, the task gets one note per breach
// (spaced in time for rate and rewinds), the refusals are counted, and the
// user's prompts are always taken.
func TestIngestQuotas(t *testing.T) {
	t.Parallel()
	for _, tt := range append(quotaCountCases(), quotaTimeCases()...) {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runQuotaCase(t, tt)
		})
	}
}

func runQuotaCase(t *testing.T, tt quotaCase) {
	t.Helper()
	m := &countMetrics{}
	e := newTaskEnvWith(t, Config{Quotas: tt.q}, m)
	s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	h := e.hostLink()
	for i, st := range tt.steps {
		switch {
		case st.advance > 0:
			e.advance(st.advance)
		case st.prompt != "":
			if _, err := e.co.SendTask(context.Background(), "t1", st.prompt); err != nil {
				t.Fatalf("step %d: the user's prompt was refused: %v", i, err)
			}
		default:
			postIngest(t, h, s, i, ingestPost{rewound: st.rewound, events: st.events, cursor: st.cursor})
		}
	}
	guest, notes, prompts := splitConversation(t, e.events(t, "t1"))
	if !reflect.DeepEqual(guest, tt.wantGuest) {
		t.Errorf("guest events %q, want %q", guest, tt.wantGuest)
	}
	if fmt.Sprint(notes) != fmt.Sprint(orEmpty(tt.wantNotes)) || prompts != tt.wantPrompts {
		t.Errorf("notes %v and %d prompts, want %v and %d", notes, prompts, tt.wantNotes, tt.wantPrompts)
	}
	if got := m.got(); fmt.Sprint(got) != fmt.Sprint(orEmpty(tt.wantRefused)) {
		t.Errorf("refusals counted %v, want %v", got, tt.wantRefused)
	}
	if len(tt.wantNotes) > 0 {
		if got := e.getTask(t, "t1"); !strings.HasPrefix(got.Error, QuotaErrorKind+": ") {
			t.Errorf("task error %q, want the quota's note", got.Error)
		}
	}
}

func orEmpty(m map[string]int) map[string]int {
	if m == nil {
		return map[string]int{}
	}
	return m
}

// splitConversation is the texts of a conversation's guest events, its
// quota notes by quota and its number of prompts.
func splitConversation(t *testing.T, evs []domain.TaskEvent) (guest []string, notes map[string]int, prompts int) {
	t.Helper()
	notes = map[string]int{}
	for _, ev := range evs {
		var d struct{ Text, Kind, Quota, Message string }
		_ = json.Unmarshal(ev.Payload, &d)
		switch {
		case ev.Type == TaskEventPrompt:
			prompts++
		case ev.Type == guestapi.EventError && d.Kind == QuotaErrorKind:
			notes[d.Quota]++
			if d.Message == "" {
				t.Errorf("a quota note without a message: %s", ev.Payload)
			}
		default:
			guest = append(guest, d.Text)
		}
	}
	return guest, notes, prompts
}

// TestCoordinatorRewindsAreNotCounted: the rewinds the coordinator makes
// on a resume (Rewinder) never count toward the guest's.
func TestCoordinatorRewindsAreNotCounted(t *testing.T) {
	t.Parallel()
	e := newTaskEnvWith(t, Config{Quotas: Quotas{MaxRewinds: 1}}, nil)
	s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	h := e.hostLink()
	ctx := context.Background()
	for i := range 3 {
		postIngest(t, h, s, i, ingestPost{events: hevs(guestapi.EventAssistantText, "a", 1, 4), cursor: 4})
		if err := (Rewinder{Store: e.st}).SessionRestored(ctx, s, domain.Snapshot{HarnessSeq: 2}); err != nil {
			t.Fatal(err)
		}
		postIngest(t, h, s, i, ingestPost{cursor: 2})
	}
	postIngest(t, h, s, 9, ingestPost{rewound: ptr[int64](0), cursor: 0}) // the guest's first
	if _, notes, _ := splitConversation(t, e.events(t, "t1")); len(notes) != 0 {
		t.Errorf("notes %v after the coordinator's rewinds", notes)
	}
}

// TestFloodDoesNotBlockPrompts: while a guest floods its task with events
// far over its quotas, the user's follow-ups are each taken at once,
// recorded and handed to the session's outbox; the flood is dropped with
// one note. Durations are logged, not asserted.
func TestFloodDoesNotBlockPrompts(t *testing.T) {
	t.Parallel()
	e := newTaskEnvWith(t, Config{Quotas: Quotas{MaxEvents: 2000, Rate: 500, Burst: 1000}}, nil)
	s := e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	h := e.hostLink()
	ctx, cancel := context.WithCancel(context.Background())
	var posts atomic.Int64
	done, posted := make(chan struct{}), make(chan struct{}, 1)
	go func() { // the hostile guest: full batches, as fast as the handler answers
		defer close(done)
		for seq := int64(0); ctx.Err() == nil; seq += maxHarnessEventBatch {
			batch := hevs(guestapi.EventToolResult, "f", seq+1, seq+maxHarnessEventBatch)
			rec := postEvents(t, h, "host-a", "s1", hostlink.HarnessEventsRequest{Epoch: s.Epoch, Events: batch})
			if rec.Code != http.StatusOK {
				t.Errorf("flood post %d: %d %s", posts.Load(), rec.Code, rec.Body)
				return
			}
			posts.Add(1)
			select {
			case posted <- struct{}{}:
			default:
			}
		}
	}()
	var took []time.Duration
	for i := range 5 {
		for range 2 { // a follow-up between the flood's posts, the first over its quotas already
			select {
			case <-posted:
			case <-done:
				t.Fatal("the flood stopped")
			}
		}
		start := time.Now()
		ev, err := e.co.SendTask(context.Background(), "t1", fmt.Sprintf("follow-up %d", i))
		took = append(took, time.Since(start))
		if err != nil || ev.Type != TaskEventPrompt {
			t.Fatalf("follow-up %d during the flood: %+v %v", i, ev, err)
		}
	}
	during := posts.Load()
	cancel()
	<-done
	items, err := e.st.ListOutbox(context.Background(), "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, prompts := splitConversation(t, e.events(t, "t1"))
	if prompts != 5 || len(items) != 5 || notes[store.QuotaEvents] > 1 || notes[store.QuotaRate] > 1 {
		t.Errorf("%d prompts recorded, %d in the outbox, notes %v; want 5, 5, at most one of each", prompts, len(items), notes)
	}
	if got := e.getTask(t, "t1"); got.EventSeq > 2000+5+2 {
		t.Errorf("the task holds %d events over a quota of 2000", got.EventSeq)
	}
	t.Logf("follow-ups took %v while the flood posted %d batches of %d events", took, during, maxHarnessEventBatch)
}
