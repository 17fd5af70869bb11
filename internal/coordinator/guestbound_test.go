package coordinator_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// TestGuestBoundReport: a host's report that a session's guest hit a bound
// lands in the session's event log (what `engrams session logs` shows),
// only from the session's host at its epoch; a bad report changes nothing.
func TestGuestBoundReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, coordinator.Config{})
	hostID, _ := e.AddHost(t, "a", 4)
	otherHost, _ := e.AddHost(t, "b", 4)
	ctx := context.Background()
	s, err := e.Co.CreateSession(ctx, domain.SessionSpec{}, "")
	if err != nil {
		t.Fatal(err)
	}
	s = e.Wait(t, s.ID, domain.SessionActive)
	report := func(host domain.HostID, sid domain.SessionID, body any) int {
		b, _ := json.Marshal(body)
		path := strings.Replace(hostlink.PathGuestBound, "{id}", string(sid), 1)
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(string(b)))
		req = req.WithContext(hostlink.WithHostID(req.Context(), host))
		rec := httptest.NewRecorder()
		e.HostLink().ServeHTTP(rec, req)
		return rec.Code
	}
	good := hostlink.GuestBoundReport{Epoch: s.Epoch, Bound: "harness_event_line", Limit: 1 << 20, Got: 1<<20 + 1, Repeated: 2,
		Message: strings.Repeat("m", 2*hostlink.MaxGuestBoundMessage)}
	refusals := []struct {
		name string
		host domain.HostID
		sid  domain.SessionID
		body any
		want int
	}{
		{"another host", otherHost, s.ID, good, http.StatusConflict},
		{"an older epoch", hostID, s.ID, hostlink.GuestBoundReport{Epoch: s.Epoch - 1, Bound: "tunnels"}, http.StatusConflict},
		{"no bound", hostID, s.ID, hostlink.GuestBoundReport{Epoch: s.Epoch}, http.StatusBadRequest},
		{"a bound that is no name", hostID, s.ID, hostlink.GuestBoundReport{Epoch: s.Epoch, Bound: "Tunnels!"}, http.StatusBadRequest},
		{"not JSON", hostID, s.ID, "{", http.StatusBadRequest},
		{"an unknown session", hostID, "nope", good, http.StatusNotFound},
	}
	for _, r := range refusals {
		if got := report(r.host, r.sid, r.body); got != r.want {
			t.Errorf("%s: answered %d, want %d", r.name, got, r.want)
		}
	}
	before, _ := e.St.ListEvents(ctx, s.ID, 0, 0)
	for _, ev := range before {
		if ev.Type == hostlink.EventGuestBound {
			t.Fatalf("a refused report was recorded: %s", ev.Data)
		}
	}
	if got := report(hostID, s.ID, good); got != http.StatusNoContent {
		t.Fatalf("report from the session's host: %d, want 204", got)
	}
	evs, _ := e.St.ListEvents(ctx, s.ID, 0, 0)
	last := evs[len(evs)-1]
	var d struct {
		Bound    string `json:"bound"`
		Limit    int64  `json:"limit"`
		Got      int64  `json:"got"`
		Repeated int    `json:"repeated"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal(last.Data, &d); err != nil || last.Type != hostlink.EventGuestBound {
		t.Fatalf("last event %s %s (%v), want %s", last.Type, last.Data, err, hostlink.EventGuestBound)
	}
	if d.Bound != good.Bound || d.Limit != good.Limit || d.Got != good.Got || d.Repeated != 2 || len(d.Message) != hostlink.MaxGuestBoundMessage {
		t.Fatalf("event data %+v (message %d bytes), want the report's values with the message cut to %d", d, len(d.Message), hostlink.MaxGuestBoundMessage)
	}
	// A host that reports the same bound again within the minute is
	// answered but adds nothing to the log.
	for range 20 {
		if got := report(hostID, s.ID, good); got != http.StatusNoContent {
			t.Fatalf("repeated report: %d, want 204", got)
		}
	}
	if after, _ := e.St.ListEvents(ctx, s.ID, 0, 0); len(after) != len(evs) {
		t.Fatalf("%d events after 20 repeated reports, want %d", len(after), len(evs))
	}
}
