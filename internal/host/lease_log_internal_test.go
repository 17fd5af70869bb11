package host

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// logRecords is a slog.Handler that keeps every record as "LEVEL message
// key=value…".
type logRecords struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logRecords) WithGroup(string) slog.Handler            { return h }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { line += fmt.Sprintf(" %s=%v", a.Key, a.Value); return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, line)
	return nil
}

// take returns the records kept since the last take, without debug ones.
func (h *logRecords) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if !strings.HasPrefix(r, "DEBUG ") {
			out = append(out, r)
		}
	}
	h.recs = nil
	return out
}

// TestLeaseExpiryLogLevel (issue 26): an expired lease with no machine to
// pause (an agent restarted after its predecessor's lease ran out) is an
// INFO line, once; the ERROR is for a lease that pauses machines, once
// per expiry, and the renewal after it is a WARN.
func TestLeaseExpiryLogLevel(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		machines int
		renew    bool     // an answered heartbeat (else: a check of the lease)
		want     []string // level and message prefix of each line logged
	}
	expired := "INFO lease expired: no answered heartbeat within the lease; no machine to pause"
	pausing := "ERROR LEASE EXPIRED: no answered heartbeat within the lease; pausing every machine"
	tests := []struct {
		name  string
		steps []step
	}{
		{"restarted with no machines", []step{
			{0, false, []string{expired}},
			{0, false, nil},
			{0, true, []string{"INFO lease renewed: the coordinator answers again"}},
		}},
		{"cut off with machines", []step{
			{2, false, []string{pausing}},
			{2, false, nil},
			{2, true, []string{"WARN lease renewed: the coordinator answers again; owned machines resume"}},
		}},
		{"machines recovered while expired", []step{
			{0, false, []string{expired}},
			{1, false, []string{pausing}},
			{1, false, nil},
		}},
		{"expired again after a renewal", []step{
			{0, false, []string{expired}},
			{0, true, []string{"INFO lease renewed"}},
			{0, false, []string{expired}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			now, machines := t0, 0
			h := &logRecords{}
			l := newLease(t.TempDir(), slog.New(h), func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
				func() int { mu.Lock(); defer mu.Unlock(); return machines })
			l.renew(t0.Add(-time.Minute), 10*time.Second) // the predecessor's last answer
			h.take()
			for i, s := range tt.steps {
				mu.Lock()
				now, machines = now.Add(time.Minute), s.machines
				sent := now
				mu.Unlock()
				if s.renew {
					l.renew(sent, 10*time.Second) // run out again by the next step, a minute on
				} else {
					l.check(t.Context(), func(context.Context) {})
				}
				got := h.take()
				if len(got) != len(s.want) {
					t.Fatalf("step %d: logged %q, want %d lines %q", i, got, len(s.want), s.want)
				}
				for j, w := range s.want {
					if !strings.HasPrefix(got[j], w) {
						t.Errorf("step %d: logged %q, want %q", i, got[j], w)
					}
				}
				if s.machines > 0 && len(s.want) > 0 && strings.HasPrefix(s.want[0], "ERROR") && !strings.Contains(got[0], fmt.Sprintf("machines=%d", s.machines)) {
					t.Errorf("step %d: %q does not count the %d machines", i, got[0], s.machines)
				}
			}
		})
	}
}
