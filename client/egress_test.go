package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// egressServer serves a session's egress log of n events (seq 1..n) the
// way the API pages it, and its state; grow adds events.
type egressServer struct {
	mu      sync.Mutex
	n       int64
	state   string
	queries []string
	fail    int // the next fail reads answer 503
	// endOnGet: the first read of the session adds 3 events and ends it,
	// as if they landed between a follower's last read and its check.
	endOnGet bool
}

func (s *egressServer) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(apiv1.RouteEgress, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.queries = append(s.queries, r.URL.RawQuery)
		if s.fail > 0 {
			s.fail--
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Code: apiv1.CodeUnavailable, Error: "busy"})
			return
		}
		q := r.URL.Query()
		limit := int64(100)
		if v := q.Get("limit"); v != "" {
			limit, _ = strconv.ParseInt(v, 10, 64)
		}
		l := apiv1.EgressList{Events: []apiv1.EgressEvent{}}
		if q.Has("after") {
			after, _ := strconv.ParseInt(q.Get("after"), 10, 64)
			for seq := after + 1; seq <= s.n && int64(len(l.Events)) < limit; seq++ {
				l.Events = append(l.Events, apiv1.EgressEvent{Seq: seq, Kind: apiv1.EgressDNS})
			}
			l.Next = after
			if len(l.Events) > 0 {
				l.Next = l.Events[len(l.Events)-1].Seq
			}
		} else {
			before := s.n + 1
			if v := q.Get("before"); v != "" {
				before, _ = strconv.ParseInt(v, 10, 64)
			}
			for seq := before - 1; seq >= 1 && int64(len(l.Events)) < limit; seq-- {
				l.Events = append(l.Events, apiv1.EgressEvent{Seq: seq, Kind: apiv1.EgressDNS})
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc(apiv1.RouteGetSession, func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.endOnGet {
			s.n, s.state, s.endOnGet = s.n+3, "completed", false
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(apiv1.Session{ID: r.PathValue("id"), State: s.state})
	})
	return mux
}

func TestEgressQuery(t *testing.T) {
	t.Parallel()
	srv := &egressServer{n: 5, state: "active"}
	ts := httptest.NewServer(srv.handler())
	t.Cleanup(ts.Close)
	c := client.New(ts.URL, "tok")
	tests := []struct {
		q         client.EgressQuery
		wantQuery string
		wantSeqs  string
	}{
		{client.EgressQuery{}, "", "[5 4 3 2 1]"},
		{client.EgressQuery{Before: 4, Limit: 2}, "before=4&limit=2", "[3 2]"},
		{client.EgressQuery{Ascending: true}, "after=0", "[1 2 3 4 5]"},
		{client.EgressQuery{Ascending: true, After: 3, Before: 9}, "after=3", "[4 5]"},
	}
	for _, tt := range tests {
		l, err := c.Sessions().Egress(t.Context(), "s1", tt.q)
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, e := range l.Events {
			seqs = append(seqs, e.Seq)
		}
		srv.mu.Lock()
		got := srv.queries[len(srv.queries)-1]
		srv.mu.Unlock()
		if got != tt.wantQuery || fmt.Sprint(seqs) != tt.wantSeqs {
			t.Errorf("%+v: query %q seqs %v, want %q %s", tt.q, got, seqs, tt.wantQuery, tt.wantSeqs)
		}
	}
}

// TestFollowEgress: following passes every event once, in order, across
// full pages and polls, through transient failures, and ends after the
// session ended and a last read found nothing new.
func TestFollowEgress(t *testing.T) {
	t.Parallel()
	errEnough := errors.New("enough")
	tests := []struct {
		name     string
		after    int64
		stopAt   int64
		wantN    int
		wantLast int64
		wantErr  error
	}{
		{name: "to the end", after: 0, wantN: 2500 + 3, wantLast: 2503},
		{name: "after a seq", after: 2400, wantN: 103, wantLast: 2503},
		{name: "fn stops it", stopAt: 1200, wantN: 1200, wantLast: 1200, wantErr: errEnough},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &egressServer{n: 2500, state: "active", fail: 2, endOnGet: true}
			ts := httptest.NewServer(srv.handler())
			t.Cleanup(ts.Close)
			c := client.New(ts.URL, "tok")
			var got []int64
			err := c.Sessions().FollowEgress(t.Context(), "s1", tt.after, time.Millisecond, func(e apiv1.EgressEvent) error {
				got = append(got, e.Seq)
				if e.Seq == tt.stopAt {
					return errEnough
				}
				return nil
			})
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("FollowEgress = %v, want %v", err, tt.wantErr)
			}
			if len(got) != tt.wantN || got[len(got)-1] != tt.wantLast {
				t.Fatalf("passed %d events ending at %d, want %d ending at %d", len(got), got[len(got)-1], tt.wantN, tt.wantLast)
			}
			for i := 1; i < len(got); i++ {
				if got[i] != got[i-1]+1 {
					t.Fatalf("event %d after %d: not each once in order", got[i], got[i-1])
				}
			}
		})
	}
}
