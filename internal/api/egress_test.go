package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egresslog"
	"github.com/engrams/engrams/internal/store"
)

// TestEgressRoute reads a session's egress log through the API over the
// real egress log and SQLite store: newest first in pages with a before=
// cursor, after= following oldest first, bad cursors refused.
func TestEgressRoute(t *testing.T) {
	t.Parallel()
	if apiv1.MaxEgressPage != egresslog.MaxPage || egresslog.MaxPage != store.MaxEgressPage {
		t.Fatalf("page bounds differ: api %d, egress log %d, store %d", apiv1.MaxEgressPage, egresslog.MaxPage, store.MaxEgressPage)
	}
	a := newAgentAPI(t, agentOpts{})
	ctx := context.Background()
	sess, _, _, err := a.st.CreateSession(ctx, store.NewSession{ID: "s1", OpID: "op1", Spec: domain.SessionSpec{Image: "x", Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}}})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	var evs []domain.EgressEvent
	for i := range 5 {
		evs = append(evs, domain.EgressEvent{At: at.Add(time.Duration(i) * time.Second), Kind: "tls", Host: fmt.Sprintf("h%d.test", i+1), Port: 443,
			Verdict: "allow", BytesUp: 1, BytesDown: 2, Reason: "ok"})
	}
	evs[3] = domain.EgressEvent{At: at.Add(3 * time.Second), Kind: "udp", Proto: "udp", Addr: "2001:db8::1", Port: 123, Verdict: "deny", Reason: "dropped"}
	evs = append(evs, domain.EgressEvent{At: at, Kind: "dropped", Dropped: 9, Reason: "9 not kept"})
	if _, err := a.st.AppendEgressEvents(ctx, store.EgressAppend{SessionID: sess.ID, Events: evs}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		target   string
		status   int
		wantSeqs string
		wantNext int64
		says     string
	}{
		{target: "/v1/sessions/s1/egress", status: 200, wantSeqs: "[6 5 4 3 2 1]"},
		{target: "/v1/sessions/s1/egress?limit=2", status: 200, wantSeqs: "[6 5]", wantNext: 5},
		{target: "/v1/sessions/s1/egress?limit=2&before=5", status: 200, wantSeqs: "[4 3]", wantNext: 3},
		{target: "/v1/sessions/s1/egress?limit=2&before=3", status: 200, wantSeqs: "[2 1]", wantNext: 1},
		{target: "/v1/sessions/s1/egress?limit=2&before=1", status: 200, wantSeqs: "[]"},
		{target: "/v1/sessions/s1/egress?after=0&limit=4", status: 200, wantSeqs: "[1 2 3 4]", wantNext: 4},
		{target: "/v1/sessions/s1/egress?after=4", status: 200, wantSeqs: "[5 6]", wantNext: 6},
		{target: "/v1/sessions/s1/egress?after=6", status: 200, wantSeqs: "[]", wantNext: 6},
		{target: "/v1/sessions/nope/egress", status: 404, says: "nope"},
		{target: "/v1/sessions/s1/egress?limit=1001", status: 400, says: "limit"},
		{target: "/v1/sessions/s1/egress?limit=0", status: 400, says: "limit"},
		{target: "/v1/sessions/s1/egress?before=0", status: 400, says: "before"},
		{target: "/v1/sessions/s1/egress?after=-1", status: 400, says: "after"},
		{target: "/v1/sessions/s1/egress?after=x", status: 400, says: "after"},
		{target: "/v1/sessions/s1/egress?after=1&before=3", status: 400, says: "give one"},
	}
	for _, tt := range tests {
		rec := a.do(http.MethodGet, tt.target, "", nil)
		if rec.Code != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.target, rec.Code, tt.status, rec.Body)
			continue
		}
		if tt.status != 200 {
			check(t, tt.target, rec, tt.status, []string{tt.says}, nil)
			continue
		}
		var l apiv1.EgressList
		if err := json.Unmarshal(rec.Body.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		seqs := make([]int64, 0, len(l.Events))
		for _, e := range l.Events {
			seqs = append(seqs, e.Seq)
		}
		if fmt.Sprint(seqs) != tt.wantSeqs || l.Next != tt.wantNext {
			t.Errorf("%s: seqs %v next %d, want %s next %d", tt.target, seqs, l.Next, tt.wantSeqs, tt.wantNext)
		}
	}
	rec := a.do(http.MethodGet, "/v1/sessions/s1/egress?limit=2", "", nil)
	check(t, "fields", rec, 200, []string{`{"seq":6,"time":"2026-12-03T10:00:00Z","kind":"dropped","bytes_up":0,"bytes_down":0,"reason":"9 not kept","dropped":9}`,
		`{"seq":5,"time":"2026-12-03T10:00:04Z","kind":"tls","host":"h5.test","port":443,"verdict":"allow","bytes_up":1,"bytes_down":2,"reason":"ok"}`}, nil)
	rec = a.do(http.MethodGet, "/v1/sessions/s1/egress?limit=1&before=5", "", nil)
	check(t, "a dropped flow's fields", rec, 200, []string{
		`{"seq":4,"time":"2026-12-03T10:00:03Z","kind":"udp","proto":"udp","addr":"2001:db8::1","port":123,"verdict":"deny","bytes_up":0,"bytes_down":0,"reason":"dropped"}`}, nil)
}
