package coordinator

import (
	"strconv"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

func TestReportLimiter(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	a := reportKey{"s1", "tunnels"}
	b := reportKey{"s1", "harness_event_line"}
	steps := []struct {
		name     string
		key      reportKey
		repeated int
		at       time.Duration
		ok       bool
		total    int
	}{
		{"first report of a bound", a, 2, 0, true, 2},
		{"again within the minute", a, 3, 10 * time.Second, false, 0},
		{"and again", a, -5, 59 * time.Second, false, 0},
		{"another bound is its own", b, 0, 59 * time.Second, true, 0},
		{"after the minute: what was held back counts", a, 1, 61 * time.Second, true, 1 + (1 + 3) + (1 + 0)},
		{"the count starts over", a, 0, 2 * time.Minute, false, 0},
		{"a minute later still", a, 0, 2*time.Minute + 2*time.Second, true, 1},
	}
	l := newReportLimiter()
	for _, s := range steps {
		ok, total := l.admit(s.key, s.repeated, t0.Add(s.at))
		if ok != s.ok || total != s.total {
			t.Errorf("%s: admit = %v, %d; want %v, %d", s.name, ok, total, s.ok, s.total)
		}
	}
}

func TestReportLimiterTracksBoundedKeys(t *testing.T) {
	t.Parallel()
	l := newReportLimiter()
	t0 := time.Unix(1000, 0)
	for i := range maxReportTracked {
		if ok, _ := l.admit(reportKey{bound: "b", session: domain.SessionID(strconv.Itoa(i))}, 0, t0); !ok {
			t.Fatalf("report %d refused below the bound", i)
		}
	}
	if ok, _ := l.admit(reportKey{bound: "b", session: "one more"}, 0, t0.Add(time.Second)); ok {
		t.Fatal("a key past the bound was tracked")
	}
	if len(l.seen) != maxReportTracked {
		t.Fatalf("%d keys tracked, want %d", len(l.seen), maxReportTracked)
	}
	if ok, _ := l.admit(reportKey{bound: "b", session: "one more"}, 0, t0.Add(reportEvery)); !ok {
		t.Fatal("the old keys did not expire")
	}
	if len(l.seen) != 1 {
		t.Fatalf("%d keys tracked after expiry, want 1", len(l.seen))
	}
}
