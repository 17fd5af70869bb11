package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
)

// Egress reporting bounds.
const (
	// egressFlushEvery: a machine's egress events go to the coordinator
	// at least once a second, at once when a full report is waiting.
	egressFlushEvery = time.Second
	// maxEgressBuffered: events waiting for the link (4 reports); more are
	// counted lost and reported as such.
	maxEgressBuffered = 4 * hostlink.MaxEgressEvents
	// egressDrainLimit bounds the last flush when Run ends.
	egressDrainLimit = time.Second
)

// PostEgress sends one egress report of session sid to the coordinator
// (hostlink.PathEgress) under the highest epoch a command brought for it,
// its events clipped to the report's bounds. A refusal for a stale epoch
// is sent again at once with the epoch a command brought since, as guest
// bound reports are. rep holds at most hostlink.MaxEgressEvents events.
func (rl *Relay) PostEgress(ctx context.Context, sid string, rep hostlink.EgressReport) error {
	if len(rep.Events) > hostlink.MaxEgressEvents {
		return fmt.Errorf("report egress of %s: %d events, at most %d a report", sid, len(rep.Events), hostlink.MaxEgressEvents)
	}
	for i, e := range rep.Events {
		rep.Events[i] = e.Clipped()
	}
	post := func() error {
		client := rl.link.Client()
		if client == nil {
			return errNoLink
		}
		epoch, err := rl.epochs.HighestEpoch(sid)
		if err != nil {
			return fmt.Errorf("report egress of %s: %w", sid, err)
		}
		rep.Epoch = epoch
		return rl.link.Post(ctx, client, hostlink.EgressPath(sid), rep, nil)
	}
	err := post()
	var refused statusCoder
	if errors.As(err, &refused) && refused.StatusCode() == http.StatusConflict {
		err = post()
	}
	return err
}

// EgressReporter batches one session's egress events for the coordinator:
// the sink its machine's filtering resolver and egress proxy record into.
// Record and Lost never block; Run posts.
type EgressReporter struct {
	rl  *Relay
	sid string
	log *slog.Logger

	mu   sync.Mutex
	buf  []hostlink.EgressEvent
	lost int64
	full chan struct{} // signalled when a full report is waiting
}

// EgressReporter returns the reporter of session sid's egress; run it
// (Run) for as long as the machine's network lives.
func (rl *Relay) EgressReporter(sid string) *EgressReporter {
	return &EgressReporter{rl: rl, sid: sid, log: rl.log.With("session_id", sid), full: make(chan struct{}, 1)}
}

// Record queues one event (the coordinator stamps one without a time);
// past maxEgressBuffered waiting events it is counted lost instead.
func (r *EgressReporter) Record(e hostlink.EgressEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) >= maxEgressBuffered {
		r.lost++
		return
	}
	r.buf = append(r.buf, e.Clipped())
	if len(r.buf) == hostlink.MaxEgressEvents {
		select {
		case r.full <- struct{}{}:
		default:
		}
	}
}

// Lost counts n events lost before they reached the reporter (the egress
// sink's queue was full).
func (r *EgressReporter) Lost(n int64) {
	if n <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost += n
}

// Run posts the waiting events every egressFlushEvery, and at once when a
// full report waits, until ctx ends; then it posts what is left (for at
// most egressDrainLimit) and returns nil. A report the coordinator did not
// take stays queued for the next try; one it refused for good (the
// session moved on) is dropped and logged.
func (r *EgressReporter) Run(ctx context.Context) error {
	t := time.NewTicker(egressFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), egressDrainLimit)
			defer cancel()
			for r.flush(dctx) {
			}
			return nil
		case <-t.C:
		case <-r.full:
		}
		for r.flush(ctx) {
		}
	}
}

// flush posts one report of the oldest waiting events; it reports whether
// it posted and more are waiting.
func (r *EgressReporter) flush(ctx context.Context) bool {
	r.mu.Lock()
	n := min(len(r.buf), hostlink.MaxEgressEvents)
	rep := hostlink.EgressReport{Events: append([]hostlink.EgressEvent(nil), r.buf[:n]...), Dropped: min(r.lost, hostlink.MaxEgressDropped)}
	r.mu.Unlock()
	if n == 0 && rep.Dropped == 0 {
		return false
	}
	err := r.rl.PostEgress(ctx, r.sid, rep)
	var refused statusCoder
	gone := errors.As(err, &refused) && refused.StatusCode()/100 == 4
	if err != nil && !gone {
		if ctx.Err() == nil {
			r.log.Info("egress report not delivered; kept for the next try", "events", n, "err", err)
		}
		return false
	}
	if gone {
		r.log.Info("egress report refused; dropped", "events", n, "err", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf[:0], r.buf[n:]...)
	r.lost -= rep.Dropped
	return len(r.buf) > 0
}
