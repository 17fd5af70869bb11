package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
)

// egressLink is a coordinator taking egress reports: it records each,
// and answers the scripted errors first.
type egressLink struct {
	mu      sync.Mutex
	reports []hostlink.EgressReport
	paths   []string
	answers []error // answered to the next posts, in order (nil: taken)
}

func (l *egressLink) Client() *http.Client { return &http.Client{} }

func (l *egressLink) Post(_ context.Context, _ *http.Client, path string, in, _ any) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	rep, ok := in.(hostlink.EgressReport)
	if !ok {
		return fmt.Errorf("unexpected post %T", in)
	}
	if len(l.answers) > 0 {
		err := l.answers[0]
		l.answers = l.answers[1:]
		if err != nil {
			return err
		}
	}
	l.reports = append(l.reports, rep)
	l.paths = append(l.paths, path)
	return nil
}

func (l *egressLink) taken() []hostlink.EgressReport {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]hostlink.EgressReport(nil), l.reports...)
}

// refusal is a coordinator's answer with a status.
type refusal int

func (r refusal) Error() string   { return fmt.Sprintf("refused %d", int(r)) }
func (r refusal) StatusCode() int { return int(r) }

// risingEpochs answers a higher epoch each time it is asked.
type risingEpochs struct {
	mu sync.Mutex
	n  int64
}

func (e *risingEpochs) HighestEpoch(string) (int64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	return e.n, nil
}

func egressEv(i int) hostlink.EgressEvent {
	return hostlink.EgressEvent{Kind: hostlink.EgressTLS, Host: fmt.Sprintf("h%d.test", i), Port: 443, Verdict: hostlink.EgressAllow}
}

// TestPostEgress: a report goes to the session's route under its epoch,
// clipped; a stale-epoch refusal is sent again once with the newer epoch.
func TestPostEgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		answers    []error
		wantErr    bool
		wantEpochs []int64
	}{
		{name: "taken", wantEpochs: []int64{1}},
		{name: "stale epoch: sent again", answers: []error{refusal(409)}, wantEpochs: []int64{2}},
		{name: "stale twice: given up", answers: []error{refusal(409), refusal(409)}, wantErr: true},
		{name: "another refusal: not sent again", answers: []error{refusal(400), nil}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := &egressLink{answers: tt.answers}
			rl := New(Deps{Link: l, Epochs: &risingEpochs{}})
			long := strings.Repeat("a", 400)
			err := rl.PostEgress(t.Context(), "s1", hostlink.EgressReport{Events: []hostlink.EgressEvent{{Kind: "dns", Verdict: "deny", Host: long, Reason: long}}, Dropped: 2})
			if (err != nil) != tt.wantErr {
				t.Fatalf("PostEgress = %v, want error %v", err, tt.wantErr)
			}
			var epochs []int64
			for i, r := range l.taken() {
				epochs = append(epochs, r.Epoch)
				if l.paths[i] != "/v1/sessions/s1/egress" || len(r.Events[0].Host) != hostlink.MaxEgressHost || len(r.Events[0].Reason) != hostlink.MaxEgressReason || r.Dropped != 2 {
					t.Errorf("posted to %s: %+v", l.paths[i], r)
				}
			}
			if fmt.Sprint(epochs) != fmt.Sprint(tt.wantEpochs) {
				t.Errorf("reports taken at epochs %v, want %v", epochs, tt.wantEpochs)
			}
		})
	}
	rl := New(Deps{Link: &egressLink{}, Epochs: &risingEpochs{}})
	if err := rl.PostEgress(t.Context(), "s1", hostlink.EgressReport{Events: make([]hostlink.EgressEvent, hostlink.MaxEgressEvents+1)}); err == nil {
		t.Error("a report over MaxEgressEvents was sent")
	}
}

// TestEgressReporter: events go out in reports of at most MaxEgressEvents,
// in order, each once: at once when a report is full, else within a
// second; past the buffer they are counted lost and reported; a failed
// post keeps them; a refused one drops them; Run's end drains.
func TestEgressReporter(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		l := &egressLink{}
		rl := New(Deps{Link: l, Epochs: &risingEpochs{}})
		r := rl.EgressReporter("s1")
		// A burst over the buffer: full reports at once, the rest lost.
		for i := range maxEgressBuffered + 10 {
			r.Record(egressEv(i))
		}
		r.Lost(5)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- r.Run(ctx) }()
		synctest.Wait()
		got := l.taken()
		if len(got) != 4 || len(got[0].Events) != hostlink.MaxEgressEvents || got[0].Dropped != 15 || got[1].Dropped != 0 {
			t.Fatalf("after a burst, %d reports (first of %d events, %d dropped), want 4 full ones at once, the first with 15 dropped", len(got), len(got[0].Events), got[0].Dropped)
		}
		// A few: within a second.
		r.Record(egressEv(2000))
		synctest.Wait()
		if len(l.taken()) != 4 {
			t.Fatal("a lone event went out before the flush")
		}
		time.Sleep(egressFlushEvery)
		synctest.Wait()
		if got := l.taken(); len(got) != 5 || len(got[4].Events) != 1 {
			t.Fatalf("after a second: %d reports", len(got))
		}
		// The link fails: kept; then refused for good: dropped.
		l.mu.Lock()
		l.answers = []error{errors.New("link down"), refusal(404)}
		l.mu.Unlock()
		r.Record(egressEv(3000))
		time.Sleep(egressFlushEvery)
		synctest.Wait()
		r.Record(egressEv(3001))
		time.Sleep(egressFlushEvery) // the refused post carries both
		synctest.Wait()
		r.Record(egressEv(4000))
		cancel() // drains the last one
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		var hosts []string
		for _, rep := range l.taken() {
			for _, e := range rep.Events {
				hosts = append(hosts, e.Host)
			}
		}
		if len(hosts) != maxEgressBuffered+2 || hosts[0] != "h0.test" || hosts[maxEgressBuffered-1] != fmt.Sprintf("h%d.test", maxEgressBuffered-1) ||
			hosts[maxEgressBuffered] != "h2000.test" || hosts[maxEgressBuffered+1] != "h4000.test" {
			t.Fatalf("%d events went out (first %s, last %s), want the buffer's in order, h2000, then h4000 (3000 and 3001 refused)", len(hosts), hosts[0], hosts[len(hosts)-1])
		}
	})
}
