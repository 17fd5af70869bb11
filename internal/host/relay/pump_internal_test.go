package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// recLink is a coordinator that takes harness events above its cursor
// (lowering it on a rewind, as the store does) and records every post and
// guest bound report.
type recLink struct {
	mu      sync.Mutex
	cursor  int64
	taken   []int64 // seqs taken, in order
	batches []int   // events per post with events
	sizes   []int   // bytes of each such post's events
	rewinds []int64
	reports []hostlink.GuestBoundReport
}

func (l *recLink) Client() *http.Client { return &http.Client{} }

func (l *recLink) Post(_ context.Context, _ *http.Client, _ string, in, out any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch v := in.(type) {
	case hostlink.HarnessEventsRequest:
		if v.RewoundTo != nil {
			l.rewinds = append(l.rewinds, *v.RewoundTo)
			l.cursor = min(l.cursor, *v.RewoundTo)
		}
		if len(v.Events) > 0 {
			b, _ := json.Marshal(v.Events)
			l.batches, l.sizes = append(l.batches, len(v.Events)), append(l.sizes, len(b))
		}
		for _, e := range v.Events {
			if e.Seq > l.cursor {
				l.taken, l.cursor = append(l.taken, e.Seq), e.Seq
			}
		}
		out.(*hostlink.HarnessEventsResponse).Cursor = l.cursor
	case hostlink.GuestBoundReport:
		l.reports = append(l.reports, v)
	default:
		return fmt.Errorf("unexpected post %T", in)
	}
	return nil
}

func (l *recLink) bounds() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, r := range l.reports {
		out[r.Bound]++
	}
	return out
}

type oneEpoch struct{}

func (oneEpoch) HighestEpoch(string) (int64, error) { return 1, nil }

// scriptEvent is one line of a scripted stream: seq says when it is sent
// (only to a request after a lower seq; 0: always), write writes it.
type scriptEvent struct {
	seq   int64
	write func(w io.Writer) error
}

func line(seq int64, data string) scriptEvent {
	return scriptEvent{seq: seq, write: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, `{"seq":%d,"type":"assistant_text","data":{"text":%q}}`+"\n", seq, data)
		return err
	}}
}

func raw(seq int64, s string) scriptEvent {
	return scriptEvent{seq: seq, write: func(w io.Writer) error { _, err := io.WriteString(w, s); return err }}
}

// endless writes n bytes of 'a' (n < 0: until the host hangs up), then a
// newline.
func endless(seq int64, prefix string, n int64) scriptEvent {
	return scriptEvent{seq: seq, write: func(w io.Writer) error {
		if _, err := io.WriteString(w, prefix); err != nil {
			return err
		}
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for sent := int64(0); n < 0 || sent < n; sent += int64(len(chunk)) {
			if _, err := w.Write(chunk[:chunkLen(n, sent, len(chunk))]); err != nil {
				return err
			}
		}
		_, err := io.WriteString(w, "\"}}\n")
		return err
	}}
}

func chunkLen(n, sent int64, size int) int {
	if n < 0 {
		return size
	}
	return int(min(int64(size), n-sent))
}

// scriptGuest plays the guest daemon's harness event stream over net.Pipe.
type scriptGuest struct {
	head   int64 // Engrams-Harness-Head; -1: none
	events func() []scriptEvent
	hold   bool // keep the stream open after the events

	mu   sync.Mutex
	asks []int64 // the after of every request
}

func (g *scriptGuest) dial(context.Context) (net.Conn, error) {
	host, guest := net.Pipe()
	go g.serve(guest)
	return host, nil
}

func (g *scriptGuest) serve(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	after, _ := strconv.ParseInt(req.URL.Query().Get("after"), 10, 64)
	g.mu.Lock()
	g.asks = append(g.asks, after)
	g.mu.Unlock()
	bw := bufio.NewWriterSize(c, 64<<10)
	head := ""
	if g.head >= 0 {
		head = guestapi.HeaderHarnessHead + ": " + strconv.FormatInt(g.head, 10) + "\r\n"
	}
	fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n%s\r\n", head)
	for _, e := range g.events() {
		if e.seq == 0 || e.seq > after || g.head >= 0 && after > g.head && e.seq > g.head {
			if e.write(bw) != nil {
				return
			}
		}
	}
	if bw.Flush() != nil {
		return
	}
	if g.hold {
		_, _ = io.Copy(io.Discard, c) // until the host hangs up
	}
}

// runPump relays mc's events for d (in the bubble's time), then stops.
func runPump(t *testing.T, g *scriptGuest, l *recLink, d time.Duration) {
	t.Helper()
	rl := New(Deps{Link: l, Epochs: oneEpoch{}})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { _ = rl.Run(ctx); close(ran) }()
	m := &dialStub{stubMachine: stubMachine{done: make(chan struct{})}, dial: g.dial}
	mc := machines.NewMachine("s1", 1, hostlink.MachineSpec{HarnessID: "h1"}, m, nil)
	stop := rl.whileMachine(mc, func(ctx context.Context) { rl.pump(ctx, mc) })
	time.Sleep(d)
	synctest.Wait()
	stop()
	cancel()
	<-ran
	mc.Transport().CloseIdleConnections()
	synctest.Wait()
}

func seqs(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

// TestPumpBounds plays hostile guests' event streams to the relay: every
// bound ends (or slows) the stream, the relay takes what is valid around
// it, and the session gets a report naming the bound.
func TestPumpBounds(t *testing.T) {
	t.Parallel()
	for _, tt := range pumpCases() {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := &recLink{}
				runPump(t, tt.guest, l, tt.run)
				got := l.bounds()
				if tt.wantBound != "" && got[tt.wantBound] != 1 {
					t.Errorf("reports %v, want one of %s", got, tt.wantBound)
				}
				if tt.wantBound == "" && len(got) > 0 {
					t.Errorf("reports %v, want none", got)
				}
				for _, r := range l.reports {
					if r.Epoch != 1 || r.Limit <= 0 || r.Got <= 0 || r.Message == "" {
						t.Errorf("report %+v: want the epoch, the values and a message", r)
					}
				}
				tt.check(t, l, tt.guest)
			})
		})
	}
}

type pumpCase struct {
	name      string
	guest     *scriptGuest
	run       time.Duration
	wantBound string
	check     func(t *testing.T, l *recLink, g *scriptGuest)
}

func pumpCases() []pumpCase {
	many := func(n int, data string) []scriptEvent {
		out := make([]scriptEvent, n)
		for i := range out {
			out[i] = line(int64(i+1), data)
		}
		return out
	}
	return []pumpCase{
		{name: "an endless event line", run: time.Minute, wantBound: BoundEventLine,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), endless(2, `{"seq":2,"type":"assistant_text","data":{"text":"`, -1), line(3, "three")}
			}},
			check: wantTaken(1, 3)},
		{name: "a 1 GiB event", run: time.Minute, wantBound: BoundEventLine,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), endless(2, `{"seq":2,"type":"assistant_text","data":{"text":"`, 1<<30), line(3, "three")}
			}},
			check: wantTaken(1, 3)},
		{name: "an event just under the line bound", run: time.Minute,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), endless(2, `{"seq":2,"type":"assistant_text","data":{"text":"`, maxEventLine-100), line(3, "three")}
			}},
			check: wantTaken(1, 2, 3)},
		{name: "a line that is no event", run: time.Minute, wantBound: BoundEventInvalid,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), raw(2, "{\"seq\":2,\"type\":\n"), line(3, "three")}
			}},
			check: wantTaken(1, 3)},
		{name: "an event without a type", run: time.Minute, wantBound: BoundEventInvalid,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), raw(2, "{\"seq\":2}\n"), line(3, "three")}
			}},
			check: wantTaken(1, 3)},
		{name: "old and blank lines", run: time.Minute,
			guest: &scriptGuest{head: -1, events: func() []scriptEvent {
				return []scriptEvent{line(1, "one"), raw(0, "\n  \n"), raw(0, `{"seq":1,"type":"idle"}`+"\n"), line(2, "two")}
			}},
			check: wantTaken(1, 2)},
		{name: "100,000 events at once", run: 10 * time.Second, wantBound: BoundEventRate,
			guest: &scriptGuest{head: -1, hold: true, events: func() []scriptEvent { return many(100_000, "x") }},
			check: func(t *testing.T, l *recLink, _ *scriptGuest) {
				// 2000 at once, then 200 a second for 10 s; a post may
				// carry up to a second of them early.
				if n := len(l.taken); n < eventBurst+9*eventRate || n > eventBurst+11*eventRate {
					t.Errorf("relayed %d events in 10 s, want about %d", n, eventBurst+10*eventRate)
				}
				wantBatches(t, l)
			}},
		{name: "event bytes too fast", run: 10 * time.Second, wantBound: BoundEventByteRate,
			guest: &scriptGuest{head: -1, hold: true, events: func() []scriptEvent { return many(1000, string(bytes.Repeat([]byte("b"), 512<<10))) }},
			check: func(t *testing.T, l *recLink, _ *scriptGuest) {
				// 16 MiB at once, then 4 MiB a second: 32 + 8 a second.
				if n := len(l.taken); n < 32+9*8 || n > 32+11*8 {
					t.Errorf("relayed %d half-MiB events in 10 s, want about %d", n, 32+10*8)
				}
				wantBatches(t, l)
			}},
		{name: "a rewind loop", run: 50 * time.Second, wantBound: BoundRewinds,
			guest: &scriptGuest{head: 0, events: func() []scriptEvent { return many(3, "again") }},
			check: func(t *testing.T, l *recLink, g *scriptGuest) {
				if len(l.rewinds) != maxRewinds {
					t.Errorf("the coordinator was asked to rewind %d times, want %d", len(l.rewinds), maxRewinds)
				}
				if want := 3 * (maxRewinds + 1); len(l.taken) != want {
					t.Errorf("the coordinator took %d events (%v), want the 3 once and after each rewind: %d", len(l.taken), l.taken, want)
				}
				if len(g.asks) < 8 {
					t.Errorf("the relay asked %d times in 50 s; the loop should go on", len(g.asks))
				}
			}},
	}
}

func wantTaken(want ...int64) func(t *testing.T, l *recLink, _ *scriptGuest) {
	return func(t *testing.T, l *recLink, _ *scriptGuest) {
		t.Helper()
		if fmt.Sprint(l.taken) != fmt.Sprint(want) {
			t.Errorf("the coordinator took %v, want %v", l.taken, want)
		}
	}
}

func wantBatches(t *testing.T, l *recLink) {
	t.Helper()
	for i, n := range l.batches {
		if n > pumpBatch || l.sizes[i] > maxBatchBytes+64<<10 {
			t.Errorf("post %d carried %d events, %d bytes: over %d or %d", i, n, l.sizes[i], pumpBatch, maxBatchBytes)
		}
	}
}
