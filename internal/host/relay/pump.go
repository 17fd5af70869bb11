package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// statusCoder is a coordinator's refusal of a post (Link.Post).
type statusCoder interface{ StatusCode() int }

// Harness event relay bounds (a line's: events.go).
const (
	pumpRetryMin = 200 * time.Millisecond
	pumpRetryMax = 5 * time.Second
	// pumpBatch and maxBatchBytes bound one post: 256 events and 4 MiB
	// (the coordinator takes at most 1000 events and 32 MiB in one).
	pumpBatch     = 256
	maxBatchBytes = 4 << 20
	// eventRate and eventBurst: the relay reads a machine's events at 200
	// a second, after a burst of 2000. A turn writes tens, and a backlog
	// (events written while the link was down) is at most a lease's worth;
	// a faster guest is slowed (its stream waits), never buffered.
	eventRate  = 200
	eventBurst = 2000
	// eventByteRate and eventByteBurst do the same for bytes: 4 MiB a
	// second after 16 MiB.
	eventByteRate  = 4 << 20
	eventByteBurst = 16 << 20
	// maxHold: events read while over a rate wait at most a second for
	// their post.
	maxHold = time.Second
	// maxRewinds: a machine's guest may claim a shorter log than the
	// cursor (guestapi.HeaderHarnessHead) twice; an honest one does once,
	// when it was restored from an older snapshot. Each rewind makes the
	// coordinator take events again, so more are ignored (the relay goes
	// on from its cursor).
	maxRewinds = 2
)

// pumpState is a machine's relay state across its stream connections.
type pumpState struct {
	skip    int64 // stream after this seq at least: the relay skipped an event over a bound
	rewinds int   // shorter logs the guest claimed
	events  bucket
	bytes   bucket
}

func newPumpState() *pumpState {
	return &pumpState{events: bucket{rate: eventRate, burst: eventBurst}, bytes: bucket{rate: eventByteRate, burst: eventByteBurst}}
}

// pump streams the guest's events from the cursor the coordinator holds
// and posts them in batches, reconnecting with a growing wait after any
// failure (no link, the machine paused, the guest restarting, a bound)
// until ctx ends.
func (rl *Relay) pump(ctx context.Context, mc *machines.Machine) {
	log := rl.log.With("session_id", mc.SessionID())
	st := newPumpState()
	wait := pumpRetryMin
	var last string
	for ctx.Err() == nil {
		epoch, _ := rl.epochs.HighestEpoch(mc.SessionID())
		progressed, err := rl.pumpOnce(ctx, mc, st)
		if ctx.Err() != nil {
			return
		}
		var refused statusCoder
		if progressed || errors.As(err, &refused) && refused.StatusCode() == http.StatusConflict && rl.epochRose(mc.SessionID(), epoch) {
			wait = pumpRetryMin // relayed, or refused for an epoch a command has brought since
		}
		if err != nil && err.Error() != last {
			log.Debug("harness event relay interrupted", "err", err, "retry_in", wait)
			last = err.Error()
		}
		if !sleep(ctx, wait) {
			return
		}
		if !progressed {
			wait = min(wait*2, pumpRetryMax)
		}
	}
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// epochRose reports whether a command brought sid a newer epoch than
// was: a refusal for a stale one may clear at once.
func (rl *Relay) epochRose(sid string, was int64) bool {
	e, err := rl.epochs.HighestEpoch(sid)
	return err == nil && e > was
}

// pumpOnce runs one relay connection: it reads the cursor, streams the
// guest's events past it and posts them until the stream or a post fails.
// progressed reports whether any event was relayed.
func (rl *Relay) pumpOnce(ctx context.Context, mc *machines.Machine, st *pumpState) (progressed bool, err error) {
	client := rl.link.Client()
	if client == nil {
		return false, errors.New("no coordinator link")
	}
	cursor, err := rl.postHarnessEvents(ctx, client, mc, nil, nil)
	if err != nil {
		return false, err
	}
	after := max(cursor, st.skip)
	resp, err := openEvents(ctx, mc, after)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if head, err := strconv.ParseInt(resp.Header.Get(guestapi.HeaderHarnessHead), 10, 64); err == nil && head < after && head >= 0 {
		if after, err = rl.rewind(ctx, client, mc, st, after, head); err != nil {
			return false, err
		}
	}
	s := &eventStream{rl: rl, ctx: ctx, client: client, mc: mc, st: st, r: newEventReader(bufio.NewReaderSize(resp.Body, eventReadBuffer), after), start: time.Now()}
	err = s.run()
	return s.posted > 0, err
}

// openEvents asks mc's guest for its events after seq after.
func openEvents(ctx context.Context, mc *machines.Machine, after int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://guest"+guestapi.PathHarnessEvents+"?after="+strconv.FormatInt(after, 10), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	resp, err := (&http.Client{Transport: mc.Transport()}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("stream harness events: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		_ = resp.Body.Close()
		return nil, fmt.Errorf("stream harness events: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return resp, nil
}

// rewind handles a guest whose log ends at head, below the seq the relay
// asked after: the first maxRewinds times the coordinator lowers its
// cursor to head; after that the relay goes on from after (the guest's
// events up to it are skipped) and the session is told. It returns the
// seq the stream goes on after.
func (rl *Relay) rewind(ctx context.Context, client *http.Client, mc *machines.Machine, st *pumpState, after, head int64) (int64, error) {
	st.rewinds++
	if st.rewinds > maxRewinds {
		rl.Exceeded(mc, Exceeded{Bound: BoundRewinds, Limit: maxRewinds, Got: int64(st.rewinds),
			Message: fmt.Sprintf("the guest claimed a harness event log shorter than the cursor (head %d, cursor %d) %d times; the host ignores it and relays only events after seq %d",
				head, after, st.rewinds, after)})
		return after, nil
	}
	if _, err := rl.postHarnessEvents(ctx, client, mc, &head, nil); err != nil {
		return after, err
	}
	st.skip = min(st.skip, head)
	return head, nil
}

// eventStream relays one stream connection's events.
type eventStream struct {
	rl     *Relay
	ctx    context.Context
	client *http.Client
	mc     *machines.Machine
	st     *pumpState
	r      *eventReader
	start  time.Time

	batch     []guestapi.HarnessEvent
	size      int // bytes of batch's lines
	lines     int // lines read
	read      int // bytes read
	posted    int // events relayed
	throttled bool
}

// run reads events and posts them: a burst in one post (pumpBatch events
// and maxBatchBytes at most), a lone event at once, and no faster than the
// rates allow. It returns when the stream, a post or a bound ends it.
func (s *eventStream) run() error {
	for {
		e, n, rerr := s.r.next()
		s.lines, s.read = s.lines+1, s.read+n
		s.st.events.take(time.Now(), 1)
		s.st.bytes.take(time.Now(), float64(n))
		if rerr == nil {
			s.batch = append(s.batch, e)
			s.size += n
		}
		var bound *boundError
		if errors.As(rerr, &bound) {
			s.st.skip = max(s.st.skip, bound.seq)
		}
		if rerr != nil && !errors.Is(rerr, errSkip) {
			if err := s.flush(); err != nil {
				return err
			}
			if bound != nil {
				s.rl.Exceeded(s.mc, bound.Exceeded)
			}
			return fmt.Errorf("read harness events: %w", rerr)
		}
		full := len(s.batch) >= pumpBatch || s.size+maxEventLine > maxBatchBytes
		if full || s.r.br.Buffered() == 0 || s.wait() >= maxHold {
			if err := s.flush(); err != nil {
				return err
			}
			if err := s.slowDown(); err != nil {
				return err
			}
		}
	}
}

// flush posts the batch, if any.
func (s *eventStream) flush() error {
	if len(s.batch) == 0 {
		return nil
	}
	if _, err := s.rl.postHarnessEvents(s.ctx, s.client, s.mc, nil, s.batch); err != nil {
		return err
	}
	s.posted += len(s.batch)
	s.batch, s.size = s.batch[:0], 0
	return nil
}

// wait is how long the rates want the stream to pause now.
func (s *eventStream) wait() time.Duration {
	now := time.Now()
	return max(s.st.events.due(now), s.st.bytes.due(now))
}

// slowDown waits as the rates ask; the first wait of a stream is reported.
func (s *eventStream) slowDown() error {
	now := time.Now()
	ev, by := s.st.events.due(now), s.st.bytes.due(now)
	if ev <= 0 && by <= 0 {
		return nil
	}
	if !s.throttled {
		s.throttled = true
		secs := max(now.Sub(s.start).Seconds(), 1)
		if ev >= by {
			s.rl.Exceeded(s.mc, Exceeded{Bound: BoundEventRate, Limit: eventRate, Got: int64(float64(s.lines) / secs),
				Message: fmt.Sprintf("the guest sent harness events faster than %d a second (after a burst of %d): the host relays them at that rate; the guest's stream waits", eventRate, eventBurst)})
		} else {
			s.rl.Exceeded(s.mc, Exceeded{Bound: BoundEventByteRate, Limit: eventByteRate, Got: int64(float64(s.read) / secs),
				Message: fmt.Sprintf("the guest sent harness event bytes faster than %d MiB a second (after a burst of %d MiB): the host relays them at that rate; the guest's stream waits", eventByteRate>>20, eventByteBurst>>20)})
		}
	}
	if !sleep(s.ctx, max(ev, by)) {
		return s.ctx.Err()
	}
	return nil
}

// postHarnessEvents sends a batch (or none, to read the cursor) under the
// machine's epoch and returns the coordinator's cursor.
func (rl *Relay) postHarnessEvents(ctx context.Context, client *http.Client, mc *machines.Machine, rewound *int64, events []guestapi.HarnessEvent) (int64, error) {
	// The highest epoch any command for the session carried: an op's
	// claim bumps the session's epoch and its command brings it here
	// before the machine's own record catches up.
	epoch, err := rl.epochs.HighestEpoch(mc.SessionID())
	if err != nil {
		return 0, err
	}
	epoch = max(epoch, mc.Epoch())
	path := strings.Replace(hostlink.PathHarnessEvents, "{id}", mc.SessionID(), 1)
	var out hostlink.HarnessEventsResponse
	err = rl.link.Post(ctx, client, path, hostlink.HarnessEventsRequest{Epoch: epoch, RewoundTo: rewound, Events: events}, &out)
	if err != nil {
		return 0, err
	}
	return out.Cursor, nil
}

// bucket is a token bucket: rate tokens a second, at most burst banked; a
// take may overdraw it, and due says how long until it is even again.
type bucket struct {
	rate, burst float64
	tokens      float64
	last        time.Time
}

func (b *bucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else if d := now.Sub(b.last); d > 0 {
		b.tokens = min(b.burst, b.tokens+d.Seconds()*b.rate)
	}
	b.last = now
}

func (b *bucket) take(now time.Time, n float64) {
	b.refill(now)
	b.tokens -= n
}

func (b *bucket) due(now time.Time) time.Duration {
	b.refill(now)
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
