package egress

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// blockingSink holds each Record until release gets a value.
type blockingSink struct {
	release chan struct{}
	got     []Event
}

func (s *blockingSink) Record(ctx context.Context, ev Event) {
	select {
	case <-s.release:
	case <-ctx.Done():
	}
	s.got = append(s.got, ev)
}

func TestEventsDropWhenFullAndSummarize(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sink := &blockingSink{release: make(chan struct{})}
		q := NewEvents(EventsConfig{Queue: 2}, EventsDeps{Sink: sink})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- q.Run(ctx) }()
		q.Emit(Event{Kind: KindDNS, Host: "a"})
		synctest.Wait() // Run holds "a" in the sink
		for _, h := range []string{"b", "c", "d", "e", "f"} {
			q.Emit(Event{Kind: KindDNS, Host: h}) // b, c queued; d, e, f dropped
		}
		if q.Dropped() != 3 {
			t.Fatalf("dropped %d, want 3", q.Dropped())
		}
		for range 4 { // a, b, c and the summary
			sink.release <- struct{}{}
		}
		synctest.Wait()
		var hosts []string
		for _, ev := range sink.got {
			hosts = append(hosts, ev.Host)
		}
		if strings.Join(hosts, ",") != "a,b,c," {
			t.Fatalf("delivered %q, want a,b,c then the summary", hosts)
		}
		sum := sink.got[3]
		if sum.Kind != KindDropped || sum.Dropped != 3 || !strings.Contains(sum.Reason, "3 egress events dropped") {
			t.Errorf("summary %+v", sum)
		}
		if sink.got[0].Time.IsZero() {
			t.Error("an event without a time was not stamped")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestEventsRunDeliversWhatIsQueuedAtTheEnd(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		q := NewEvents(EventsConfig{Queue: 4}, EventsDeps{Sink: rec})
		q.Emit(Event{Kind: KindTLS, Host: "x"})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := q.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if got := rec.all(); len(got) != 1 || got[0].Host != "x" {
			t.Errorf("delivered %+v, want the queued event", got)
		}
		var nilQ *Events
		nilQ.Emit(Event{}) // discards
	})
}

func TestEventJSONAndClipping(t *testing.T) {
	t.Parallel()
	ev := Event{Time: time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC), Kind: KindConnect, Host: "a.test", Port: 443,
		Verdict: Allow, BytesUp: 10, BytesDown: 20, Reason: "ok"}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-12-02T07:00:00Z","kind":"connect","host":"a.test","port":443,"verdict":"allow","bytes_up":10,"bytes_down":20,"reason":"ok"}`
	if string(b) != want {
		t.Errorf("json %s\nwant %s", b, want)
	}
	for _, s := range []string{strings.Repeat("é", 300), "\xff\xfe" + strings.Repeat("a", 400), "short"} {
		c := clip(s)
		if len(c) > maxEventText || !utf8.ValidString(c) {
			t.Errorf("clip(%.20q…) = %d bytes, valid %v", s, len(c), utf8.ValidString(c))
		}
	}
}
