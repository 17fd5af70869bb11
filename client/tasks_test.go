package client_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
)

// taskFake serves task t1: each events request sends the next of streams
// (event seqs, whatever after= says; past the last, nothing) and ends the
// stream. GET says the task is running until stopAt events requests were
// served (0: stopped from the start; -1: never), then stopped at eventSeq.
type taskFake struct {
	taskScript

	mu      sync.Mutex
	afters  []string // the after= of each events request
	follows []string // its follow=
}

type taskScript struct {
	streams  [][]int64
	stopAt   int
	eventSeq int64
}

func (f *taskFake) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tasks/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "t1" {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(apiv1.Error{Error: "task " + r.PathValue("id") + ": not found", Code: "not_found"})
			return
		}
		f.mu.Lock()
		f.afters = append(f.afters, r.URL.Query().Get("after"))
		f.follows = append(f.follows, r.URL.Query().Get("follow"))
		var seqs []int64
		if n := len(f.afters); n <= len(f.streams) {
			seqs = f.streams[n-1]
		}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": keepalive\n\n")
		for _, s := range seqs {
			b, _ := json.Marshal(apiv1.TaskEvent{Seq: s, Type: "assistant_text", Data: json.RawMessage(fmt.Sprintf(`{"text":"e%d"}`, s)),
				Time: clienttest.BaseTime().Add(time.Duration(s) * time.Second)})
			fmt.Fprintf(w, "id: %d\nevent: assistant_text\ndata: %s\n\n", s, b)
		}
	})
	mux.HandleFunc("GET /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		state := apiv1.TaskRunning
		if f.stopAt >= 0 && len(f.afters) >= f.stopAt {
			state = apiv1.TaskStopped
		}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(apiv1.Task{ID: "t1", State: state, EventSeq: f.eventSeq})
	})
	return mux
}

// taskEventsCase is one TestTaskEvents case: what the fake serves, how
// TaskClient.Events is called and what it should deliver and request.
type taskEventsCase struct {
	name        string
	fake        taskScript
	after       int64
	follow      bool
	stopAt      int64 // fn returns stopErr at this seq
	stopErr     error
	wantSeqs    []int64
	wantErr     error
	wantErrText string
	wantAfters  []string
	wantFollows []string
}

func taskEventsCases() []taskEventsCase {
	errEnough := errors.New("enough")
	return []taskEventsCase{
		{name: "backlog", fake: taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{1, 2, 3}, wantAfters: []string{"0"}, wantFollows: []string{"false"}},
		{name: "backlog after", after: 1, fake: taskScript{streams: [][]int64{{2, 3}}, stopAt: -1},
			wantSeqs: []int64{2, 3}, wantAfters: []string{"1"}, wantFollows: []string{"false"}},
		{name: "backlog skips what it had", after: 2, fake: taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{3}, wantAfters: []string{"2"}, wantFollows: []string{"false"}},
		{name: "backlog of a running task does not wait", fake: taskScript{streams: [][]int64{{}}, stopAt: -1},
			wantAfters: []string{"0"}, wantFollows: []string{"false"}},
		{name: "follow returns once the task is stopped and every event came", follow: true,
			fake:     taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: 0, eventSeq: 3},
			wantSeqs: []int64{1, 2, 3}, wantAfters: []string{"0"}, wantFollows: []string{""}},
		{name: "follow reconnects after a dropped stream from the last seq, without repeats", follow: true,
			fake:     taskScript{streams: [][]int64{{1, 2}, {2, 3, 4}}, stopAt: 0, eventSeq: 4},
			wantSeqs: []int64{1, 2, 3, 4}, wantAfters: []string{"0", "2"}, wantFollows: []string{"", ""}},
		{name: "follow waits for a running task until it stops", follow: true, after: 5,
			fake:     taskScript{streams: [][]int64{{6}, {}, {7}}, stopAt: 3, eventSeq: 7},
			wantSeqs: []int64{6, 7}, wantAfters: []string{"5", "6", "6"}, wantFollows: []string{"", "", ""}},
		{name: "follow of a stopped task reconnects for events it lacks", follow: true,
			fake:     taskScript{streams: [][]int64{{1}, {2}}, stopAt: 0, eventSeq: 2},
			wantSeqs: []int64{1, 2}, wantAfters: []string{"0", "1"}, wantFollows: []string{"", ""}},
		{name: "ErrStopFollowing ends it cleanly", follow: true, stopAt: 2, stopErr: client.ErrStopFollowing,
			fake:     taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{1, 2}, wantAfters: []string{"0"}, wantFollows: []string{""}},
		{name: "ErrStopFollowing wrapped", follow: true, stopAt: 1, stopErr: fmt.Errorf("done: %w", client.ErrStopFollowing),
			fake:     taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{1}, wantAfters: []string{"0"}, wantFollows: []string{""}},
		{name: "another callback error is returned", follow: true, stopAt: 2, stopErr: errEnough,
			fake:     taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{1, 2}, wantErr: errEnough, wantAfters: []string{"0"}, wantFollows: []string{""}},
		{name: "a callback error ends a backlog", stopAt: 2, stopErr: errEnough,
			fake:     taskScript{streams: [][]int64{{1, 2, 3}}, stopAt: -1},
			wantSeqs: []int64{1, 2}, wantErr: errEnough, wantAfters: []string{"0"}, wantFollows: []string{"false"}},
		{name: "gives up on a stream that stays empty", follow: true,
			fake:        taskScript{stopAt: -1},
			wantErrText: "follow events of task t1: gave up after 3 reconnects", wantAfters: []string{"0", "0", "0", "0"}, wantFollows: []string{"", "", "", ""}},
	}
}

func TestTaskEvents(t *testing.T) {
	t.Parallel()
	for _, tt := range taskEventsCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runTaskEventsCase(t, tt)
		})
	}
}

func runTaskEventsCase(t *testing.T, tt taskEventsCase) {
	f := &taskFake{taskScript: tt.fake}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "tok", client.WithReconnect(time.Millisecond, 3))
	var seqs []int64
	err := c.Tasks().Events(t.Context(), "t1", tt.after, tt.follow, func(e apiv1.TaskEvent) error {
		var d struct{ Text string }
		if err := json.Unmarshal(e.Data, &d); err != nil || d.Text != fmt.Sprintf("e%d", e.Seq) || e.Type != "assistant_text" ||
			!e.Time.Equal(clienttest.BaseTime().Add(time.Duration(e.Seq)*time.Second)) {
			t.Errorf("event %+v", e)
		}
		seqs = append(seqs, e.Seq)
		if e.Seq == tt.stopAt {
			return tt.stopErr
		}
		return nil
	})
	switch {
	case tt.wantErrText != "":
		if err == nil || !strings.Contains(err.Error(), tt.wantErrText) {
			t.Errorf("err = %v, want %q", err, tt.wantErrText)
		}
	case !errors.Is(err, tt.wantErr) || tt.wantErr == nil && err != nil:
		t.Errorf("err = %v, want %v", err, tt.wantErr)
	}
	if !slices.Equal(seqs, tt.wantSeqs) {
		t.Errorf("seqs = %v, want %v", seqs, tt.wantSeqs)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Equal(f.afters, tt.wantAfters) || !slices.Equal(f.follows, tt.wantFollows) {
		t.Errorf("requests after=%q follow=%q, want after=%q follow=%q", f.afters, f.follows, tt.wantAfters, tt.wantFollows)
	}
}

func TestTaskEventsErrors(t *testing.T) {
	t.Parallel()
	f := &taskFake{taskScript: taskScript{stopAt: -1}}
	srv := httptest.NewServer(f.handler())
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "tok", client.WithReconnect(time.Millisecond, 3))
	for _, follow := range []bool{false, true} {
		err := c.Tasks().Events(t.Context(), "nope", 0, follow, func(apiv1.TaskEvent) error { return nil })
		if !client.IsNotFound(err) {
			t.Errorf("follow=%v: err = %v, want not found", follow, err)
		}
	}
	// A malformed event ends it with the decoding error.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "id: 1\ndata: {\"seq\":\n\n")
	}))
	t.Cleanup(bad.Close)
	err := client.New(bad.URL, "tok", client.WithReconnect(time.Millisecond, 1)).Tasks().Events(t.Context(), "t1", 0, false, func(apiv1.TaskEvent) error { return nil })
	if err == nil || !strings.Contains(err.Error(), `decode task event "1"`) {
		t.Errorf("malformed event: %v", err)
	}
}
