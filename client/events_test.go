package client_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

func TestEvents(t *testing.T) {
	t.Parallel()
	errEnough := errors.New("enough")
	tests := []struct {
		name     string
		after    int64
		follow   bool
		drop     int
		endMsg   bool  // the server ends streams with the end message
		endType  bool  // event 3 has type "end" (still an event: it has an id)
		stopAt   int64 // fn returns errEnough at this seq
		wantSeqs []int64
		wantErr  error
		wantIDs  []string // Last-Event-ID headers the server saw
	}{
		{name: "backlog", wantSeqs: []int64{1, 2, 3, 4, 5}, wantIDs: []string{""}},
		{name: "backlog after", after: 3, wantSeqs: []int64{4, 5}, wantIDs: []string{""}},
		{name: "fn error stops", stopAt: 2, wantSeqs: []int64{1, 2}, wantErr: errEnough, wantIDs: []string{""}},
		{name: "follow reconnects with Last-Event-ID", follow: true, drop: 2,
			wantSeqs: []int64{1, 2, 3, 4, 5, 6}, wantIDs: []string{"", "2", "4", "6"}}, // the last: a drain after seeing the session completed
		{name: "follow reconnects, end message", follow: true, drop: 2, endMsg: true,
			wantSeqs: []int64{1, 2, 3, 4, 5, 6}, wantIDs: []string{"", "2", "4", "6"}},
		{name: "follow after", follow: true, after: 4, wantSeqs: []int64{5, 6}, wantIDs: []string{"", "6"}},
		{name: "follow after, end message", follow: true, after: 4, endMsg: true, wantSeqs: []int64{5, 6}, wantIDs: []string{""}},
		{name: "event typed end", follow: true, endType: true, endMsg: true, wantSeqs: []int64{1, 2, 3, 4, 5, 6}, wantIDs: []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, srv := newClient(t)
			s, err := c.Sessions().Create(t.Context(), apiv1.CreateSessionRequest{}, true) // event 1
			if err != nil {
				t.Fatal(err)
			}
			for i := 2; i <= 5; i++ {
				typ := "log"
				if i == 3 && tt.endType {
					typ = apiv1.EventStreamEnd
				}
				srv.AddEvent(s.ID, typ, map[string]int{"n": i})
			}
			srv.DropAfter(tt.drop)
			srv.EndMessage(tt.endMsg)
			var seqs []int64
			err = c.Sessions().Events(t.Context(), s.ID, tt.after, tt.follow, func(ev apiv1.Event) error {
				seqs = append(seqs, ev.Seq)
				if ev.Seq == tt.stopAt {
					return errEnough
				}
				if tt.follow && ev.Seq == 5 {
					srv.AddEvent(s.ID, "log", "live") // a live event, then the session ends
					srv.SetSessionState(s.ID, "completed")
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			}
			if !slices.Equal(seqs, tt.wantSeqs) {
				t.Errorf("seqs = %v, want %v", seqs, tt.wantSeqs)
			}
			if ids := srv.LastEventIDs(); !slices.Equal(ids, tt.wantIDs) {
				t.Errorf("Last-Event-IDs = %q, want %q", ids, tt.wantIDs)
			}
		})
	}
}

func TestEventsNotFound(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	err := c.Sessions().Events(t.Context(), "nope", 0, true, func(apiv1.Event) error { return nil })
	if !client.IsNotFound(err) {
		t.Errorf("err = %v, want not found", err)
	}
}

// TestEventsGivesUp checks a followed stream that keeps closing without
// events ends after the configured reconnects, and that the SSE parser
// handles CRLF, comments and multi-line data.
func TestEventsGivesUp(t *testing.T) {
	t.Parallel()
	var conns atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/events") {
			return // GetSession: an empty answer, so the state check fails and it reconnects
		}
		if conns.Add(1) == 1 {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, ": hi\r\nid: 7\r\ndata: {\"seq\":7,\r\ndata: \"type\":\"x\"}\r\n\r\n")
		}
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "", client.WithReconnect(time.Millisecond, 2))
	var got []apiv1.Event
	err := c.Sessions().Events(t.Context(), "s", 0, true, func(ev apiv1.Event) error { got = append(got, ev); return nil })
	if err == nil || !strings.Contains(err.Error(), "gave up after 2 reconnects") {
		t.Errorf("err = %v, want gave up", err)
	}
	if len(got) != 1 || got[0].Seq != 7 || got[0].Type != "x" {
		t.Errorf("events = %+v", got)
	}
	if n := conns.Load(); n != 3 { // the first, then 2 reconnects
		t.Errorf("connections = %d, want 3", n)
	}
}
