package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// Metrics records a guest stream ended or held back over a bound
// (*metrics.Registry has it); nil records nothing.
type Metrics interface {
	GuestBoundExceeded(bound string)
}

// Bounds a guest's streams can exceed: the metric label and the bound of
// the session's report (hostlink.GuestBoundReport).
const (
	BoundEventLine     = "harness_event_line"      // one event line over maxEventLine
	BoundEventInvalid  = "harness_event_invalid"   // a line that is no event past the cursor
	BoundEventRate     = "harness_event_rate"      // events faster than eventRate
	BoundEventByteRate = "harness_event_byte_rate" // event bytes faster than eventByteRate
	BoundRewinds       = "harness_event_rewinds"   // more than maxRewinds shorter logs
	BoundTunnelHeader  = "tunnel_header"           // a tunnel answer's headers over guestapi.MaxHeaderBytes
	BoundTunnels       = "tunnels"                 // maxTunnels served at once
	BoundFileList      = "file_list"               // a listing over guestapi.MaxFileListBytes
	BoundFileStat      = "file_stat"               // a stat over guestapi.MaxAnswerBytes
)

// Reporting bounds.
const (
	// reportEvery: a machine's report of one bound goes to the coordinator
	// at most once a minute; the hits meanwhile are counted into the next,
	// so a guest hitting a bound in a loop cannot flood the session's log.
	reportEvery = time.Minute
	// maxQueuedReports: reports waiting for the link (64); more are only
	// logged and counted.
	maxQueuedReports = 64
)

// Exceeded is a bound a guest stream hit: its value, what the guest sent
// (as far as the host read it) and what the host did.
type Exceeded struct {
	Bound   string
	Limit   int64
	Got     int64
	Message string
}

// report is one queued hostlink.GuestBoundReport.
type report struct {
	mc       *machines.Machine
	e        Exceeded
	repeated int
}

type reportKey struct {
	mc    *machines.Machine
	bound string
}

// reportState is when a machine's bound was last reported and how often it
// was hit since.
type reportState struct {
	last     time.Time
	repeated int
}

// Exceeded records that a stream of mc's guest hit a bound: the metric,
// the host's log, and (at most once a minute per bound) a report the
// coordinator appends to the session's event log. It never blocks.
func (rl *Relay) Exceeded(mc *machines.Machine, e Exceeded) {
	if rl.metrics != nil {
		rl.metrics.GuestBoundExceeded(e.Bound)
	}
	log := rl.log.With("session_id", mc.SessionID(), "bound", e.Bound, "limit", e.Limit, "got", e.Got)
	now := time.Now()
	rl.mu.Lock()
	st := rl.reports[reportKey{mc, e.Bound}]
	if st == nil {
		st = &reportState{}
		rl.reports[reportKey{mc, e.Bound}] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < reportEvery {
		st.repeated++
		rl.mu.Unlock()
		log.Debug("guest stream over a bound again", "detail", e.Message)
		return
	}
	r := report{mc: mc, e: e, repeated: st.repeated}
	st.last, st.repeated = now, 0
	rl.mu.Unlock()
	log.Warn("guest stream over a bound", "detail", e.Message)
	select {
	case rl.queue <- r:
	default:
		log.Warn("guest bound report dropped: too many waiting for the coordinator")
	}
}

// forgetReports drops mc's report state (it stopped).
func (rl *Relay) forgetReports(mc *machines.Machine) {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	for k := range rl.reports {
		if k.mc == mc {
			delete(rl.reports, k)
		}
	}
}

// sendReports posts queued reports until ctx ends; one refused for an
// epoch a command has brought since is sent again at once, other failures
// are logged (the host's log and the metric keep the bound).
func (rl *Relay) sendReports(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-rl.queue:
			err := rl.sendReport(ctx, r)
			var refused statusCoder
			if errors.As(err, &refused) && refused.StatusCode() == http.StatusConflict {
				err = rl.sendReport(ctx, r)
			}
			if err != nil && ctx.Err() == nil {
				rl.log.Info("guest bound report not delivered", "session_id", r.mc.SessionID(), "bound", r.e.Bound, "err", err)
			}
		}
	}
}

func (rl *Relay) sendReport(ctx context.Context, r report) error {
	client := rl.link.Client()
	if client == nil {
		return errNoLink
	}
	epoch, err := rl.epochs.HighestEpoch(r.mc.SessionID())
	if err != nil {
		return fmt.Errorf("report guest bound: %w", err)
	}
	msg := r.e.Message
	if len(msg) > hostlink.MaxGuestBoundMessage {
		msg = strings.ToValidUTF8(msg[:hostlink.MaxGuestBoundMessage], "")
	}
	path := strings.Replace(hostlink.PathGuestBound, "{id}", r.mc.SessionID(), 1)
	return rl.link.Post(ctx, client, path, hostlink.GuestBoundReport{Epoch: max(epoch, r.mc.Epoch()), Bound: r.e.Bound,
		Limit: r.e.Limit, Got: r.e.Got, Repeated: r.repeated, Message: msg}, nil)
}
