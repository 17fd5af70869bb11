package egresslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egresslog"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// fakeStore keeps sessions and their egress rows in memory, fenced and
// bounded as store.Egress says.
type fakeStore struct {
	mu       sync.Mutex
	sessions map[domain.SessionID]domain.Session
	rows     map[domain.SessionID][]domain.EgressEvent
	appends  []store.EgressAppend
	fail     error // returned by the next appends while set
	lastQ    store.EgressQuery
}

func newFakeStore(sessions ...domain.Session) *fakeStore {
	f := &fakeStore{sessions: map[domain.SessionID]domain.Session{}, rows: map[domain.SessionID][]domain.EgressEvent{}}
	for _, s := range sessions {
		f.sessions[s.ID] = s
	}
	return f
}

func (f *fakeStore) GetSession(_ context.Context, id domain.SessionID) (domain.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sessions[id]
	if !ok {
		return domain.Session{}, fmt.Errorf("session %s: %w", id, store.ErrNotFound)
	}
	return s, nil
}

func (f *fakeStore) AppendEgressEvents(_ context.Context, a store.EgressAppend) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return 0, f.fail
	}
	s, ok := f.sessions[a.SessionID]
	switch {
	case !ok:
		return 0, store.ErrNotFound
	case a.Epoch > 0 && s.Epoch != a.Epoch:
		return 0, store.ErrStaleEpoch
	}
	f.appends = append(f.appends, a)
	rows := f.rows[a.SessionID]
	var last int64
	if len(rows) > 0 {
		last = rows[len(rows)-1].Seq
	}
	for _, e := range a.Events {
		last++
		e.SessionID, e.Seq, e.CreatedAt = a.SessionID, last, a.At
		rows = append(rows, e)
	}
	if a.Keep > 0 && len(rows) > a.Keep {
		rows = rows[len(rows)-a.Keep:]
	}
	f.rows[a.SessionID] = rows
	return last, nil
}

func (f *fakeStore) ListEgressEvents(_ context.Context, q store.EgressQuery) ([]domain.EgressEvent, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lastQ = q
	return f.rows[q.SessionID], nil
}

func (f *fakeStore) stored(sid domain.SessionID) []domain.EgressEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]domain.EgressEvent(nil), f.rows[sid]...)
}

func (f *fakeStore) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// fakeMetrics counts by kind/verdict.
type fakeMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *fakeMetrics) EgressEvents(kind, verdict string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == nil {
		m.n = map[string]int{}
	}
	m.n[kind+"/"+verdict] += n
}

func (m *fakeMetrics) get(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.n[k]
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type env struct {
	st  *fakeStore
	met *fakeMetrics
	clk *clock
	log *egresslog.Log
	mux *http.ServeMux
}

const (
	hostA = domain.HostID("host-a")
	hostB = domain.HostID("host-b")
)

var (
	active = domain.Session{ID: "s1", State: domain.SessionActive, HostID: hostA, Epoch: 4}
	idle   = domain.Session{ID: "s-idle", State: domain.SessionIdle, HostID: hostA, Epoch: 4}
)

func newEnv(t *testing.T, cfg egresslog.Config, sessions ...domain.Session) *env {
	t.Helper()
	e := &env{st: newFakeStore(sessions...), met: &fakeMetrics{}, clk: &clock{now: t0}, mux: http.NewServeMux()}
	var err error
	e.log, err = egresslog.New(cfg, egresslog.Deps{Store: e.st, Metrics: e.met, Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	e.log.RouteHostLink(e.mux)
	return e
}

// post sends body (JSON-encoded unless it is []byte) as host for sid and
// returns the status.
func (e *env) post(host domain.HostID, sid domain.SessionID, body any) (int, string) {
	b, ok := body.([]byte)
	if !ok {
		b, _ = json.Marshal(body)
	}
	req := httptest.NewRequest(http.MethodPost, hostlink.EgressPath(string(sid)), bytes.NewReader(b))
	req = req.WithContext(hostlink.WithHostID(req.Context(), host))
	rec := httptest.NewRecorder()
	e.mux.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func tlsEvent(host string, at time.Time) hostlink.EgressEvent {
	return hostlink.EgressEvent{At: at, Kind: hostlink.EgressTLS, Host: host, Port: 443, Verdict: hostlink.EgressAllow, BytesUp: 100, BytesDown: 2000, Reason: "allowed: " + host}
}

func batch(n int, ev hostlink.EgressEvent) []hostlink.EgressEvent {
	out := make([]hostlink.EgressEvent, n)
	for i := range out {
		out[i] = ev
	}
	return out
}

// TestReportFenced: only the session's host, at its epoch, while the
// session has a VM, may add to its log; a report that is not one changes
// nothing. Accepted events are stored as sent.
func TestReportFenced(t *testing.T) {
	t.Parallel()
	good := hostlink.EgressReport{Epoch: 4, Events: []hostlink.EgressEvent{tlsEvent("pypi.org", t0.Add(-time.Second)),
		{At: t0.Add(-time.Second), Kind: hostlink.EgressDNS, Host: "evil.test", Port: 53, Verdict: hostlink.EgressDeny, Reason: "not on the allowlist"},
		{At: t0.Add(-time.Second), Kind: hostlink.EgressUDP, Proto: "udp", Addr: "1.2.3.4", Port: 123, Verdict: hostlink.EgressDeny, Reason: "dropped"}}}
	tests := []struct {
		name string
		host domain.HostID
		sid  domain.SessionID
		body any
		want int
		says string
	}{
		{"another host", hostB, active.ID, good, http.StatusConflict, "came from host host-b"},
		{"an older epoch", hostA, active.ID, hostlink.EgressReport{Epoch: 3, Events: good.Events}, http.StatusConflict, "at epoch 3"},
		{"a newer epoch", hostA, active.ID, hostlink.EgressReport{Epoch: 5, Events: good.Events}, http.StatusConflict, "at epoch 5"},
		{"a session without a VM", hostA, idle.ID, good, http.StatusConflict, "is idle"},
		{"an unknown session", hostA, "nope", good, http.StatusNotFound, "nope"},
		{"an unknown kind", hostA, active.ID, []byte(`{"epoch":4,"events":[{"kind":"quic","verdict":"allow"}]}`), http.StatusBadRequest, `kind \"quic\"`},
		{"too many events", hostA, active.ID, hostlink.EgressReport{Epoch: 4, Events: batch(hostlink.MaxEgressEvents+1, good.Events[0])}, http.StatusBadRequest, "at most 256"},
		{"not JSON", hostA, active.ID, []byte(`{`), http.StatusBadRequest, "decode"},
		{"over the body bound", hostA, active.ID, append([]byte(`{"epoch":4,"x":"`), bytes.Repeat([]byte("a"), hostlink.MaxEgressReportBytes+10)...), http.StatusBadRequest, "decode"},
	}
	e := newEnv(t, egresslog.Config{}, active, idle)
	for _, tt := range tests {
		if got, body := e.post(tt.host, tt.sid, tt.body); got != tt.want || !strings.Contains(body, tt.says) {
			t.Errorf("%s: answered %d %s, want %d saying %q", tt.name, got, body, tt.want, tt.says)
		}
	}
	if got := e.st.stored(active.ID); len(got) != 0 {
		t.Fatalf("refused reports stored %+v", got)
	}
	if got, body := e.post(hostA, active.ID, good); got != http.StatusNoContent {
		t.Fatalf("good report: %d %s", got, body)
	}
	rows := e.st.stored(active.ID)
	if len(rows) != 3 {
		t.Fatalf("stored %d rows, want 3", len(rows))
	}
	want := []domain.EgressEvent{
		{SessionID: active.ID, Seq: 1, At: t0.Add(-time.Second), Kind: "tls", Host: "pypi.org", Port: 443, Verdict: "allow", BytesUp: 100, BytesDown: 2000, Reason: "allowed: pypi.org", CreatedAt: t0},
		{SessionID: active.ID, Seq: 2, At: t0.Add(-time.Second), Kind: "dns", Host: "evil.test", Port: 53, Verdict: "deny", Reason: "not on the allowlist", CreatedAt: t0},
		{SessionID: active.ID, Seq: 3, At: t0.Add(-time.Second), Kind: "udp", Proto: "udp", Addr: "1.2.3.4", Port: 123, Verdict: "deny", Reason: "dropped", CreatedAt: t0},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Errorf("stored\n%+v\nwant\n%+v", rows, want)
	}
	if a := e.st.appends[0]; a.Epoch != 4 || a.Keep != 10_000 {
		t.Errorf("append fenced at epoch %d keeping %d, want 4 and 10000", a.Epoch, a.Keep)
	}
	if e.met.get("tls/allow") != 1 || e.met.get("dns/deny") != 1 || e.met.get("udp/deny") != 1 {
		t.Errorf("metrics = %v", e.met.n)
	}
}

// TestReportClipped: what a guest chose is clipped before it is stored,
// and a time not set or ahead of the coordinator's clock is its now.
func TestReportClipped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, egresslog.Config{}, active)
	long := strings.Repeat("x", 1000)
	rep := hostlink.EgressReport{Epoch: 4, Events: []hostlink.EgressEvent{
		{At: t0.Add(time.Hour), Kind: "http", Host: long, Port: 80, Verdict: "deny", Reason: long + "\x00", BytesUp: -1},
		{Kind: "connect", Host: "a\x00b", Verdict: "deny"},
	}}
	if got, body := e.post(hostA, active.ID, rep); got != http.StatusNoContent {
		t.Fatalf("report: %d %s", got, body)
	}
	rows := e.st.stored(active.ID)
	if len(rows) != 2 {
		t.Fatalf("stored %d rows", len(rows))
	}
	r := rows[0]
	if len(r.Host) != hostlink.MaxEgressHost || len(r.Reason) != hostlink.MaxEgressReason || r.BytesUp != 0 || !r.At.Equal(t0) {
		t.Errorf("stored host %d bytes, reason %d, up %d, at %v", len(r.Host), len(r.Reason), r.BytesUp, r.At)
	}
	if rows[1].Host != "a\uFFFDb" || !rows[1].At.Equal(t0) {
		t.Errorf("stored host %q at %v", rows[1].Host, rows[1].At)
	}
}

// TestRateLimit: a session's log takes Burst events at once and Rate a
// second after; the rest, with what the host lost, are one dropped event
// at most once per SummaryEvery. The metric counts every event reported.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, egresslog.Config{Rate: 10, Burst: 20}, active)
	ev := tlsEvent("pypi.org", t0)
	steps := []struct {
		name        string
		advance     time.Duration
		events      int
		lost        int64
		wantKept    int
		wantDropped int64 // in a dropped event with them; 0: none
	}{
		{"a burst over the bucket", 0, 30, 0, 20, 10},
		{"more at once: held", 0, 5, 3, 0, 0},
		{"half a second on: 5 tokens, summary not due", 500 * time.Millisecond, 8, 0, 5, 0},
		{"a second after the summary: due", 500 * time.Millisecond, 0, 1, 0, 5 + 3 + 3 + 1},
		{"a quiet minute: a full bucket", time.Minute, 20, 0, 20, 0},
	}
	for _, s := range steps {
		e.clk.advance(s.advance)
		before := len(e.st.stored(active.ID))
		if got, body := e.post(hostA, active.ID, hostlink.EgressReport{Epoch: 4, Events: batch(s.events, ev), Dropped: s.lost}); got != http.StatusNoContent {
			t.Fatalf("%s: %d %s", s.name, got, body)
		}
		added := e.st.stored(active.ID)[before:]
		kept, dropped := 0, int64(0)
		for _, r := range added {
			switch r.Kind {
			case hostlink.EgressDropped:
				dropped += r.Dropped
				if r.Reason == "" || r.Verdict != "" {
					t.Errorf("%s: dropped event %+v", s.name, r)
				}
			default:
				kept++
			}
		}
		if kept != s.wantKept || dropped != s.wantDropped {
			t.Errorf("%s: kept %d and a dropped event of %d, want %d and %d", s.name, kept, dropped, s.wantKept, s.wantDropped)
		}
		if len(added) > 0 && added[len(added)-1].Kind != hostlink.EgressDropped && dropped > 0 {
			t.Errorf("%s: the dropped event is not after the kept ones", s.name)
		}
	}
	if got := e.met.get("tls/allow"); got != 30+5+8+20 {
		t.Errorf("metric counted %d tls/allow, want every one reported (63)", got)
	}
	if got := e.met.get("dropped/unknown"); got != 4 {
		t.Errorf("metric counted %d lost by the host, want 4", got)
	}
}

// TestRunFlushesPending: events held back when the host stops reporting
// are recorded by Run once the summary is due; a store failure keeps them
// for the next try.
func TestRunFlushesPending(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore(active)
		log, err := egresslog.New(egresslog.Config{Rate: 1, Burst: 2}, egresslog.Deps{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		log.RouteHostLink(mux)
		post := func(n int) int {
			b, _ := json.Marshal(hostlink.EgressReport{Epoch: 4, Events: batch(n, tlsEvent("a.test", time.Now()))})
			req := httptest.NewRequest(http.MethodPost, hostlink.EgressPath(string(active.ID)), bytes.NewReader(b))
			req = req.WithContext(hostlink.WithHostID(req.Context(), hostA))
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			return rec.Code
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- log.Run(ctx) }()
		if post(3) != http.StatusNoContent || post(4) != http.StatusNoContent { // 2 kept, 1 dropped at once, then 4 held
			t.Fatal("reports refused")
		}
		dropped := func() (n int64) {
			for _, r := range st.stored(active.ID) {
				n += r.Dropped
			}
			return n
		}
		st.setFail(errors.New("database down"))
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if got := dropped(); got != 1 {
			t.Fatalf("with the store down, %d recorded dropped, want the first 1 only", got)
		}
		st.setFail(nil)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := dropped(); got != 1+4 {
			t.Fatalf("after Run's flush %d recorded dropped, want 5", got)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := dropped(); got != 5 {
			t.Fatalf("later flushes recorded %d dropped, want still 5", got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
	})
}

// TestReportStoreFailure: a report the store could not take is answered
// 503 (the host may send it again) and its dropped count is not lost.
func TestReportStoreFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, egresslog.Config{Rate: 1, Burst: 1}, active)
	e.st.setFail(errors.New("database down"))
	if got, _ := e.post(hostA, active.ID, hostlink.EgressReport{Epoch: 4, Events: batch(3, tlsEvent("a.test", t0))}); got != http.StatusServiceUnavailable {
		t.Fatalf("report with the store down: %d, want 503", got)
	}
	e.st.setFail(nil)
	if got, _ := e.post(hostA, active.ID, hostlink.EgressReport{Epoch: 4, Dropped: 1}); got != http.StatusNoContent {
		t.Fatalf("next report: %d", got)
	}
	rows := e.st.stored(active.ID)
	if len(rows) != 1 || rows[0].Dropped != 2+1 {
		t.Fatalf("stored %+v, want one dropped event of 3", rows)
	}
}

// TestEgressEvents: reads check the session and the page's bounds, and
// pass the cursor through.
func TestEgressEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, egresslog.Config{}, active)
	tests := []struct {
		name    string
		sid     domain.SessionID
		q       egresslog.Query
		wantErr error
		wantQ   store.EgressQuery
	}{
		{"newest first", active.ID, egresslog.Query{Before: 40, Limit: 10}, nil, store.EgressQuery{SessionID: active.ID, Before: 40, Limit: 10}},
		{"following", active.ID, egresslog.Query{Ascending: true, After: 7}, nil, store.EgressQuery{SessionID: active.ID, Ascending: true, After: 7}},
		{"an unknown session", "nope", egresslog.Query{}, domain.ErrNotFound, store.EgressQuery{}},
		{"a page too large", active.ID, egresslog.Query{Limit: egresslog.MaxPage + 1}, domain.ErrInvalid, store.EgressQuery{}},
		{"a negative cursor", active.ID, egresslog.Query{Before: -1}, domain.ErrInvalid, store.EgressQuery{}},
	}
	for _, tt := range tests {
		e.st.lastQ = store.EgressQuery{}
		_, err := e.log.EgressEvents(t.Context(), tt.sid, tt.q)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("%s: error %v, want %v", tt.name, err, tt.wantErr)
		}
		if e.st.lastQ != tt.wantQ {
			t.Errorf("%s: store asked %+v, want %+v", tt.name, e.st.lastQ, tt.wantQ)
		}
	}
}
