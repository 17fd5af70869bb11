package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// Deps are the relay's collaborators.
type Deps struct {
	Logger  *slog.Logger
	Link    Link
	Epochs  Epochs
	Metrics Metrics // nil: none
}

// Link is the coordinator link as the helpers use it.
type Link interface {
	// Client is the registered link's client; nil while there is none.
	Client() *http.Client
	// Post sends in as JSON to the coordinator and decodes its answer into
	// out (nil: discarded). A refusal's error has a StatusCode() int method.
	Post(ctx context.Context, client *http.Client, path string, in, out any) error
}

// Epochs reads the highest epoch any command for a session carried
// (machines.Registry does).
type Epochs interface {
	HighestEpoch(sid string) (int64, error)
}

// Relay starts the helpers of every published machine that has a harness
// and stops them with it; the machine lifecycle calls Published, Ready and
// Stopped.
type Relay struct {
	log     *slog.Logger
	link    Link
	epochs  Epochs
	metrics Metrics
	queue   chan report // guest bound reports waiting for the link

	mu      sync.Mutex
	stops   map[*machines.Machine][]context.CancelFunc
	reports map[reportKey]*reportState
	stopped bool
	stop    chan struct{} // closed when Run ends: helpers return
	wg      sync.WaitGroup
}

// New returns a relay; Run joins its helpers.
func New(deps Deps) *Relay {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Relay{log: deps.Logger, link: deps.Link, epochs: deps.Epochs, metrics: deps.Metrics,
		queue: make(chan report, maxQueuedReports), reports: map[reportKey]*reportState{},
		stops: map[*machines.Machine][]context.CancelFunc{}, stop: make(chan struct{})}
}

// Run sends guest bound reports until ctx ends, then stops every helper
// and joins them.
func (rl *Relay) Run(ctx context.Context) error {
	var reports sync.WaitGroup
	reports.Go(func() { rl.sendReports(ctx) })
	defer reports.Wait()
	<-ctx.Done()
	rl.mu.Lock()
	if !rl.stopped {
		rl.stopped = true
		close(rl.stop)
	}
	rl.mu.Unlock()
	rl.wg.Wait()
	return nil
}

// Published starts the harness event relay and the gateway tunnels of a
// machine with a harness.
func (rl *Relay) Published(mc *machines.Machine) {
	if mc.Spec().HarnessID == "" {
		return
	}
	stops := []context.CancelFunc{
		rl.whileMachine(mc, func(ctx context.Context) { rl.pump(ctx, mc) }),
		rl.whileMachine(mc, func(ctx context.Context) { rl.runTunnels(ctx, mc) }),
	}
	rl.mu.Lock()
	rl.stops[mc] = stops
	rl.mu.Unlock()
}

// Stopped ends mc's helpers (if any).
func (rl *Relay) Stopped(mc *machines.Machine) {
	rl.mu.Lock()
	stops := rl.stops[mc]
	delete(rl.stops, mc)
	rl.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	rl.forgetReports(mc)
}

// whileMachine runs fn in the background until the returned stop is
// called, mc exits or Run ends; Run joins it.
func (rl *Relay) whileMachine(mc *machines.Machine, fn func(ctx context.Context)) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	rl.mu.Lock()
	if rl.stopped {
		rl.mu.Unlock()
		cancel()
		return cancel
	}
	rl.wg.Add(1)
	rl.mu.Unlock()
	go func() {
		defer rl.wg.Done()
		defer cancel()
		go func() { // ends with ctx at the latest (the deferred cancel)
			select {
			case <-rl.stop:
			case <-mc.VM().Done():
			case <-ctx.Done():
			}
			cancel()
		}()
		fn(ctx)
	}()
	return cancel
}

// Ready confirms that a machine started with a harness has it ready in
// the guest (its descriptor loaded, its entrypoint present), so a session
// is Active only once its harness can take prompts. A machine without a
// harness passes.
func (rl *Relay) Ready(ctx context.Context, mc *machines.Machine) error {
	spec := mc.Spec()
	if spec.HarnessID == "" {
		return nil
	}
	var st guestapi.HarnessStatus
	if err := mc.Call(ctx, http.MethodGet, guestapi.PathHarness, nil, &st); err != nil {
		return failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed, fmt.Errorf("read the harness state of session %s: %w", mc.SessionID(), err))
	}
	if st.State != guestapi.HarnessReady {
		msg := st.Error
		if msg == "" {
			msg = "no harness bundle is mounted"
		}
		return failure.New(http.StatusBadGateway, hostlink.CodeGuestFailed,
			fmt.Errorf("harness %s of session %s did not start (%s): %s", spec.Harness, mc.SessionID(), st.State, msg))
	}
	return nil
}
