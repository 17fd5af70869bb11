package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// collect follows l from after until it has n events (or fails the test).
func collect(t *testing.T, l *eventLog, after int64, n int) []guestapi.HarnessEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []guestapi.HarnessEvent
	errEnough := errors.New("enough")
	err := l.follow(ctx, after, func(line []byte) error {
		var e guestapi.HarnessEvent
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("bad line %q: %v", line, err)
		}
		out = append(out, e)
		if len(out) == n {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("follow from %d: %d of %d events, %v", after, len(out), n, err)
	}
	return out
}

func appendN(t *testing.T, l *eventLog, n int) {
	t.Helper()
	var batch []pendingEvent
	for i := range n {
		batch = append(batch, pendingEvent{Type: guestapi.EventAssistantText, Turn: "t", Data: guestapi.AssistantTextData{Text: "x"}})
		if len(batch) == 100 || i == n-1 {
			if err := l.append(batch...); err != nil {
				t.Fatal(err)
			}
			batch = nil
		}
	}
}

func TestEventLogFollow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := newEventLog(dir)
	if head, _, err := l.head(); err != nil || head != 0 {
		t.Fatalf("empty log head = %d, %v", head, err)
	}
	appendN(t, l, 2*eventMarkEvery+500)
	tests := []struct {
		after int64
		n     int
	}{{0, 10}, {5, 3}, {eventMarkEvery - 1, 3}, {eventMarkEvery, 2}, {2*eventMarkEvery + 100, 400}}
	for _, tt := range tests {
		got := collect(t, l, tt.after, tt.n)
		for i, e := range got {
			if e.Seq != tt.after+int64(i)+1 || e.Turn != "t" || e.Type != guestapi.EventAssistantText {
				t.Fatalf("after %d: event %d is %+v", tt.after, i, e)
			}
		}
	}
	l.close()

	// Another process (a restarted daemon) reads the same state.
	l2 := newEventLog(dir)
	if head, _, err := l2.head(); err != nil || head != 2*eventMarkEvery+500 {
		t.Fatalf("reloaded head = %d, %v", head, err)
	}
	if got := collect(t, l2, eventMarkEvery+7, 1); got[0].Seq != eventMarkEvery+8 {
		t.Errorf("reloaded log from a mark: %+v", got[0])
	}
}

// TestEventLogFollowsAppends: a follower that reached the end of the log
// gets each later append without polling.
func TestEventLogFollowsAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		l := newEventLog(dir)
		defer l.close()
		appendN(t, l, 3)
		done := make(chan []guestapi.HarnessEvent)
		go func() { done <- collect(t, l, 3, 2) }()
		synctest.Wait() // the follower waits at the end of the log
		if err := l.append(pendingEvent{Type: guestapi.EventIdle, Turn: "u", Data: guestapi.IdleData{Result: "r"}}, pendingEvent{Type: guestapi.EventUsage}); err != nil {
			t.Fatal(err)
		}
		if got := <-done; got[0].Type != guestapi.EventIdle || got[0].Seq != 4 || got[0].Turn != "u" || got[1].Seq != 5 {
			t.Fatalf("followed %+v", got)
		}
		if typ, turn, err := l.lastEvent(); err != nil || typ != guestapi.EventUsage || turn != "" {
			t.Errorf("lastEvent = %q %q %v", typ, turn, err)
		}
	})
}

func TestEventLogTornTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := newEventLog(dir)
	appendN(t, l, 3)
	l.close()
	p := filepath.Join(dir, eventsFile)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(`{"seq":4,"type":"id`); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l = newEventLog(dir)
	if err := l.append(pendingEvent{Type: guestapi.EventIdle}); err != nil {
		t.Fatal(err)
	}
	got := collect(t, l, 0, 4)
	if got[3].Seq != 4 || got[3].Type != guestapi.EventIdle {
		t.Errorf("after repair: %+v", got[3])
	}
	// A log with a gap is refused, not silently renumbered.
	if err := os.WriteFile(p, []byte(`{"seq":1,"type":"idle","at":"2026-01-01T00:00:00Z"}`+"\n"+`{"seq":3,"type":"idle","at":"2026-01-01T00:00:00Z"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := newEventLog(dir).head(); err == nil {
		t.Error("a log with a seq gap loaded")
	}
}
