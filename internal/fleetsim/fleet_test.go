package fleetsim

import (
	"flag"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
)

var (
	seeds     = flag.Int("fleetsim.seeds", 200, "how many seeds TestFleet runs (-short: a fifth)")
	firstSeed = flag.Int("fleetsim.first", 0, "first seed TestFleet runs")
	numSteps  = flag.Int("fleetsim.steps", 60, "random steps per seed")
	longCrash = flag.Bool("fleetsim.longcrash", false, "crashed hosts stay down longer than HostLostAfter")
	trace     = flag.Bool("fleetsim.trace", false, "log every seed's steps and coordinator log, passing or not")
)

// options tune one run; the zero value is the faithful simulation.
type options struct {
	steps     int
	longCrash bool
	sabotage  sabotage
}

// TestFleet runs the simulation once per seed. A failing seed prints the
// command that replays it, its step log and the coordinator's log.
func TestFleet(t *testing.T) {
	t.Parallel()
	n := *seeds
	if testing.Short() {
		n = max(1, n/5)
	}
	opts := options{steps: *numSteps, longCrash: *longCrash}
	for seed := *firstSeed; seed < *firstSeed+n; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				s, bad := runSeed(t, uint64(seed), dir, opts)
				switch {
				case len(bad) > 0:
					t.Error(s.report(bad))
				case *trace:
					t.Log(s.report(nil))
				}
			})
		})
	}
}

// runSeed runs the random steps, checking after each, then quiesces and
// checks that no acknowledged outbox item was lost or applied twice. It
// returns the first violations found.
func runSeed(t *testing.T, seed uint64, dir string, opts options) (*sim, []string) {
	s, stop := newSim(t, seed, dir, opts)
	defer stop()
	synctest.Wait()
	for step := range opts.steps {
		name, what := s.randomEvent()
		s.logf("step %d %s: %s", step, name, what)
		s.pause()
		synctest.Wait()
		if bad := s.check(); len(bad) > 0 {
			return s, bad
		}
	}
	restless := s.quiesce()
	synctest.Wait()
	bad := s.check()
	for _, id := range restless {
		bad = append(bad, fmt.Sprintf("session %s never came to rest after the faults ended", id))
	}
	return s, append(bad, s.checkOutbox()...)
}

// report is what a failing seed prints: the violations, how to replay it,
// its step log and the tail of the coordinator's log.
func (s *sim) report(bad []string) string {
	s.mu.Lock()
	steps := strings.Join(s.steps, "\n")
	s.mu.Unlock()
	var b strings.Builder
	if len(bad) > 0 {
		fmt.Fprintf(&b, "invariant violated (seed %d):\n  %s\n\n", s.seed, strings.Join(bad, "\n  "))
	}
	extra := ""
	if s.opts.longCrash {
		extra = " -fleetsim.longcrash"
	}
	fmt.Fprintf(&b, "replay: go test ./internal/fleetsim -run 'TestFleet/seed=%d$' -fleetsim.first=%d -fleetsim.seeds=1 -fleetsim.steps=%d -v%s\n\nsteps:\n%s\n\ncoordinator log (tail):\n%s",
		s.seed, s.seed, s.opts.steps, extra, steps, strings.Join(s.clog.tail(200), "\n"))
	return b.String()
}
