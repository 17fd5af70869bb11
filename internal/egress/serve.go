package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// acceptLoop hands each connection ln accepts to handle until ctx ends
// (nil) or ln is closed under it (an error). Other accept errors (out of
// file descriptors) are logged and retried after a growing pause.
func acceptLoop(ctx context.Context, ln net.Listener, log *slog.Logger, what string, handle func(net.Conn)) error {
	pause := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("%s: accept: %w", what, err)
			}
			log.Warn(what+": accept", "err", err)
			if !sleepCtx(ctx, pause) {
				return nil
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		handle(c)
	}
}

// sleepCtx waits d, false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// refusals counts what is refused wholesale (over a rate, past a bound),
// so a flood becomes one event per reason a second, not one per packet.
type refusals struct {
	events *Events
	kind   Kind
	mu     sync.Mutex
	counts map[string]int64
	last   time.Time
}

// add counts one refusal for reason (a constant), reporting the counts
// if the last report is a second old.
func (r *refusals) add(reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]int64{}
	}
	r.counts[reason]++
	if time.Since(r.last) >= time.Second {
		r.flushLocked()
	}
}

// flush reports the counts not reported yet.
func (r *refusals) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushLocked()
}

func (r *refusals) flushLocked() {
	for reason, n := range r.counts {
		r.events.Emit(Event{Kind: r.kind, Verdict: Deny, Reason: fmt.Sprintf("%d %s", n, reason)})
	}
	clear(r.counts)
	r.last = time.Now()
}
