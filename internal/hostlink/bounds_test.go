package hostlink_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/hostlink"
)

// TestHostStreamsServedAtOnceBounded: a host (it may be compromised) that
// opens far more requests than MaxServedStreams gets at most that many
// served at once by the coordinator; the rest wait and are served as
// places free up.
func TestHostStreamsServedAtOnceBounded(t *testing.T) {
	t.Parallel()
	const sent = hostlink.MaxServedStreams + 44
	var (
		mu       sync.Mutex
		inFlight int
		most     int
	)
	all := make(chan struct{})
	release := make(chan struct{})
	blocking := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == sent {
			close(all)
		}
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	c := newCoordinatorWith(t, "a", "secret", nil, func(_ *hostlink.ServerConfig, d *hostlink.ServerDeps) { d.Handler = blocking })
	conn := dialHost(t, c.http.URL, "tok-1", nil)
	waitFor(t, c.connects, "host-1")
	client := conn.HTTPClient()

	var wg sync.WaitGroup
	codes := make(chan int, sent)
	for range sent {
		wg.Go(func() {
			resp, err := client.Post("http://coordinator/anything", "text/plain", nil)
			if err != nil {
				t.Errorf("post: %v", err)
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		})
	}
	// Unbounded, every request is in a handler well within two seconds.
	select {
	case <-all:
	case <-time.After(2 * time.Second):
	}
	close(release)
	wg.Wait()
	close(codes)
	served := 0
	for code := range codes {
		if code == http.StatusNoContent {
			served++
		}
	}
	if most != hostlink.MaxServedStreams {
		t.Errorf("at most %d requests were served at once, want %d", most, hostlink.MaxServedStreams)
	}
	if served != sent {
		t.Errorf("%d of %d requests served once places freed up", served, sent)
	}
}

// TestHostHeadersBounded: a request header block past MaxHeaderBytes is
// refused (431) without reaching a handler.
func TestHostHeadersBounded(t *testing.T) {
	t.Parallel()
	reached := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached <- struct{}{} })
	c := newCoordinatorWith(t, "a", "secret", nil, func(_ *hostlink.ServerConfig, d *hostlink.ServerDeps) { d.Handler = h })
	conn := dialHost(t, c.http.URL, "tok-1", nil)
	waitFor(t, c.connects, "host-1")
	req, _ := http.NewRequest(http.MethodGet, "http://coordinator/x", nil)
	req.Header.Set("X-Big", strings.Repeat("a", hostlink.MaxHeaderBytes+8<<10))
	resp, err := conn.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("status %d, want 431", resp.StatusCode)
	}
	if len(reached) != 0 {
		t.Error("the handler was reached")
	}
}
