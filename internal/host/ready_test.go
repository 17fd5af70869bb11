package host_test

import (
	"context"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host"
)

// TestReadyFollowsTheLink: the agent is ready only while it holds a
// registered link: not before it dials, not after the coordinator drops
// the link, and again once it registers anew.
func TestReadyFollowsTheLink(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	a, err := host.New(host.Config{CoordinatorURL: serve(t, c), Token: "tok", Name: "test-host", DataDir: t.TempDir(),
		HeartbeatInterval: time.Hour, Capacity: domain.Capacity{MemoryMiB: 4096, VCPUs: 4}}, host.Deps{Backend: fakeBackend{w}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(t.Context()); err == nil {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	until := func(what string, ready bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for (a.Ready(t.Context()) == nil) != ready {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Ready = %v after %s", what, a.Ready(t.Context()), wait)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	recv(t, c.registers, nil)
	until("registered", true)
	heal := c.partition() // registers hang, so the next link is not up yet
	c.restart()
	until("link dropped", false)
	heal()
	recv(t, c.registers, nil)
	until("registered again", true)
}
