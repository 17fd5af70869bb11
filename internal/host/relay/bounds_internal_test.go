package relay

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

type countMetrics struct {
	mu sync.Mutex
	n  map[string]int
}

func (m *countMetrics) GuestBoundExceeded(bound string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.n[bound]++
}

// TestExceededReports: every hit of a bound is counted; the session gets a
// report of each bound of a machine at most once a minute, the next one
// counting the hits between, with the machine's epoch and a message cut
// to the report's bound.
func TestExceededReports(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := &recLink{}
		met := &countMetrics{n: map[string]int{}}
		rl := New(Deps{Link: l, Epochs: oneEpoch{}, Metrics: met})
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { _ = rl.Run(ctx); close(ran) }()
		mc := machines.NewMachine("s1", 3, hostlink.MachineSpec{HarnessID: "h1"}, &stubMachine{done: make(chan struct{})}, nil)
		long := strings.Repeat("€", hostlink.MaxGuestBoundMessage)
		hit := func(bound string) { rl.Exceeded(mc, Exceeded{Bound: bound, Limit: 1, Got: 2, Message: long}) }
		for range 5 {
			hit(BoundTunnels)
		}
		hit(BoundEventLine)
		time.Sleep(reportEvery)
		hit(BoundTunnels)
		synctest.Wait()
		cancel()
		<-ran

		var got []string
		for _, r := range l.reports {
			got = append(got, r.Bound+"/"+strconv.Itoa(r.Repeated))
			if r.Epoch != 3 || len(r.Message) > hostlink.MaxGuestBoundMessage || !strings.HasPrefix(long, r.Message) {
				t.Errorf("report %s: epoch %d, message of %d bytes; want epoch 3 and the message cut whole to %d", r.Bound, r.Epoch, len(r.Message), hostlink.MaxGuestBoundMessage)
			}
		}
		if want := "tunnels/0 harness_event_line/0 tunnels/4"; strings.Join(got, " ") != want {
			t.Errorf("reports %v, want %s", got, want)
		}
		if met.n[BoundTunnels] != 6 || met.n[BoundEventLine] != 1 {
			t.Errorf("metrics %v, want every hit counted", met.n)
		}
	})
}
