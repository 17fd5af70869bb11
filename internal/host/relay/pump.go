package relay

import (
	"bufio"
	"context"
	"encoding/json"
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

// Harness event relay bounds.
const (
	pumpRetryMin = 200 * time.Millisecond
	pumpRetryMax = 5 * time.Second
	pumpBatch    = 256 // events per post at most
)

// pump streams the guest's events from the cursor the coordinator holds
// and posts them in batches, reconnecting with a growing wait after any
// failure (no link, the machine paused, the guest restarting) until ctx
// ends.
func (rl *Relay) pump(ctx context.Context, mc *machines.Machine) {
	log := rl.log.With("session_id", mc.SessionID())
	wait := pumpRetryMin
	var last string
	for ctx.Err() == nil {
		epoch, _ := rl.epochs.HighestEpoch(mc.SessionID())
		progressed, err := rl.pumpOnce(ctx, mc)
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
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if !progressed {
			wait = min(wait*2, pumpRetryMax)
		}
	}
}

// epochRose reports whether a command brought sid a newer epoch than
// was: a refusal for a stale epoch may clear at once.
func (rl *Relay) epochRose(sid string, was int64) bool {
	e, err := rl.epochs.HighestEpoch(sid)
	return err == nil && e > was
}

// pumpOnce runs one relay connection: it reads the cursor, streams the
// guest's events past it and posts them until the stream or a post fails.
// progressed reports whether any event was relayed.
func (rl *Relay) pumpOnce(ctx context.Context, mc *machines.Machine) (progressed bool, err error) {
	client := rl.link.Client()
	if client == nil {
		return false, errors.New("no coordinator link")
	}
	cursor, err := rl.postHarnessEvents(ctx, client, mc, nil, nil)
	if err != nil {
		return false, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		"http://guest"+guestapi.PathHarnessEvents+"?after="+strconv.FormatInt(cursor, 10), nil)
	if err != nil {
		return false, err
	}
	req.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	resp, err := (&http.Client{Transport: mc.Transport()}).Do(req)
	if err != nil {
		return false, fmt.Errorf("stream harness events: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return false, fmt.Errorf("stream harness events: %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	if head, err := strconv.ParseInt(resp.Header.Get(guestapi.HeaderHarnessHead), 10, 64); err == nil && head < cursor {
		if _, err := rl.postHarnessEvents(ctx, client, mc, &head, nil); err != nil {
			return false, err
		}
	}
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		batch, rerr := readEventBatch(br)
		if len(batch) > 0 {
			if _, err := rl.postHarnessEvents(ctx, client, mc, nil, batch); err != nil {
				return progressed, err
			}
			progressed = true
		}
		if rerr != nil {
			return progressed, fmt.Errorf("read harness events: %w", rerr)
		}
	}
}

// readEventBatch reads at least one event, then as many more as are
// already buffered (up to pumpBatch): a burst goes out in one post, a
// lone event at once.
func readEventBatch(br *bufio.Reader) ([]guestapi.HarnessEvent, error) {
	var out []guestapi.HarnessEvent
	for len(out) < pumpBatch {
		if len(out) > 0 && br.Buffered() == 0 {
			return out, nil
		}
		line, err := br.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 && err == nil {
			var e guestapi.HarnessEvent
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				return out, fmt.Errorf("decode harness event: %w", jerr)
			}
			out = append(out, e)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
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
