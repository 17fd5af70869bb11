package process_test

import (
	"context"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm/process"
)

// TestPausedRecoverAndDestroy: a host agent that restarts while a machine
// is paused reattaches it still paused; Resume brings it back; Destroy of
// a paused machine ends every process promptly.
func TestPausedRecoverAndDestroy(t *testing.T) {
	t.Parallel()
	b := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{})
	spec := newSpec(t)
	m, err := b.Boot(ctxFor(t, 20*time.Second), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	pids := startLeftovers(t, m)
	if err := m.Pause(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("pause: %v", err)
	}
	m2, err := process.New(process.Config{GuestBinary: guestBinary}, process.Deps{}).Recover(ctxFor(t, 20*time.Second), spec.Dir)
	if err != nil {
		t.Fatalf("recover a paused machine: %v", err)
	}
	if err := m2.Resume(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("resume: %v", err)
	}
	c := guestapi.NewClient(m2.Dial)
	defer c.Close()
	if _, err := c.Ready(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("ready after resume: %v", err)
	}
	if err := m2.Pause(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	began := time.Now()
	if err := m2.Destroy(ctxFor(t, 20*time.Second)); err != nil {
		t.Fatalf("destroy paused: %v", err)
	}
	if d := time.Since(began); d > 1500*time.Millisecond {
		t.Errorf("destroying a paused machine took %v", d)
	}
	waitAllGone(t, pids)
}
