package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
)

// devSessions is what stopping dev needs of the coordinator.
type devSessions interface {
	Suspend(ctx context.Context, id domain.SessionID) (domain.Session, domain.Op, error)
	WaitOp(ctx context.Context, op domain.Op) (domain.Op, domain.Session, error)
	WaitSession(ctx context.Context, id domain.SessionID, done func(domain.Session) bool) (domain.Session, error)
}

// devReads is what stopping dev reads of the store.
type devReads interface {
	ListSessions(ctx context.Context, f domain.SessionFilter) ([]domain.Session, error)
	GetSession(ctx context.Context, id domain.SessionID) (domain.Session, error)
	GetSnapshot(ctx context.Context, id domain.SnapshotID) (domain.Snapshot, error)
}

// devStop suspends dev's running sessions on the way out, so that their
// state survives and no VM keeps running after dev ends (`host run`, by
// contrast, leaves machines running for the next agent to adopt).
type devStop struct {
	co      devSessions
	reads   devReads
	out     io.Writer // progress, for the person at the terminal
	timeout time.Duration
}

// stopped is how one session ended up.
type stopped struct {
	s   domain.Session
	err error
}

// watch is a part of dev: at the first signal it suspends every session,
// then returns (which stops dev); a second signal stops at once.
func (d *devStop) watch(sigs <-chan os.Signal) func(context.Context) error {
	return func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		}
		return d.run(ctx, sigs)
	}
}

// run suspends every session that has a VM, printing each as it settles,
// until all have, the timeout passes or abort receives. It names the
// sessions it left.
func (d *devStop) run(ctx context.Context, abort <-chan os.Signal) error {
	ss, err := d.reads.ListSessions(ctx, domain.SessionFilter{States: domain.VMStates()})
	if err != nil {
		return fmt.Errorf("stop dev: list sessions to suspend: %w", err)
	}
	if len(ss) == 0 {
		return nil
	}
	fmt.Fprintf(d.out, "suspending %d session%s… (Ctrl-C again to stop at once, leaving them running)\n", len(ss), plural(len(ss)))
	sctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	results := make(chan stopped, len(ss))
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Go(func() { results <- d.suspend(sctx, s) })
	}
	left := map[domain.SessionID]bool{}
	for _, s := range ss {
		left[s.ID] = true
	}
	cut := ""
	for n := 1; n <= len(ss) && cut == ""; n++ {
		select {
		case r := <-results:
			d.report(ctx, n, len(ss), r)
			if r.err == nil {
				delete(left, r.s.ID)
			}
		case <-abort:
			cut = "stopped at once"
		case <-sctx.Done():
			cut = fmt.Sprintf("gave up after %s", d.timeout)
		}
	}
	cancel()
	wg.Wait()
	close(results)
	for r := range results { // those that finished as the rest were cut off
		if r.err == nil {
			delete(left, r.s.ID)
		}
	}
	if len(left) == 0 {
		return nil
	}
	return d.leftover(ctx, cut, left)
}

// suspend waits until s settles, suspends it if it is Active, and waits
// for the snapshot to be committed.
func (d *devStop) suspend(ctx context.Context, s domain.Session) stopped {
	for {
		s, err := d.co.WaitSession(ctx, s.ID, coordinator.Settled)
		if err != nil {
			return stopped{s, err}
		}
		if s.State != domain.SessionActive {
			return stopped{s: s} // idle, completed or dead: no VM
		}
		_, op, err := d.co.Suspend(ctx, s.ID)
		if errors.Is(err, domain.ErrNotActive) {
			continue // it moved meanwhile: settle again
		}
		if err != nil {
			return stopped{s, err}
		}
		done, s, err := d.co.WaitOp(ctx, op)
		switch {
		case err != nil:
			return stopped{s, err}
		case s.State != domain.SessionIdle:
			return stopped{s, fmt.Errorf("not suspended: %s", done.Error)}
		}
		return stopped{s: s}
	}
}

// report prints one session's outcome: "2/3 s-… idle (snapshot 12.0 MiB uploaded)".
func (d *devStop) report(ctx context.Context, n, of int, r stopped) {
	line := fmt.Sprintf("%d/%d %s %s", n, of, r.s.ID, r.s.State)
	switch {
	case r.err != nil:
		line += ": " + r.err.Error()
	case r.s.State == domain.SessionIdle && r.s.HeadSnapshotID != "":
		if snap, err := d.reads.GetSnapshot(ctx, r.s.HeadSnapshotID); err == nil {
			line += " (snapshot " + sizeOf(snap.Uploaded) + " uploaded)"
		}
	}
	fmt.Fprintln(d.out, line)
}

// leftover lists the sessions not suspended, each as it is now, and
// returns the error dev ends with.
func (d *devStop) leftover(ctx context.Context, why string, left map[domain.SessionID]bool) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	fmt.Fprintf(d.out, "%s; left:\n", why)
	ids := slices.Sorted(maps.Keys(left))
	for _, id := range ids {
		s, err := d.reads.GetSession(rctx, id)
		note := "its VM keeps running; the next `engrams dev` adopts it"
		switch {
		case err != nil:
			note = "state unknown: " + err.Error()
		case s.State == domain.SessionSuspending:
			note = "partially suspended: its VM keeps running until the next `engrams dev` finishes or undoes the snapshot"
		case !s.State.HasVM():
			note = "no VM"
		}
		fmt.Fprintf(d.out, "  %s %s (%s)\n", id, s.State, note)
	}
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = string(id)
	}
	return fmt.Errorf("stopped with %d session%s not suspended: %s", len(ids), plural(len(ids)), strings.Join(names, ", "))
}

// sizeOf is n bytes in KiB or MiB.
func sizeOf(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", (n+1023)>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
