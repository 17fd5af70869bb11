package coordinator_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/coordinator/coordinatortest"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// opMetrics is a coordinator.Metrics that counts what it is told.
type opMetrics struct {
	mu       sync.Mutex
	ops      map[string]int // "kind/outcome"
	uploaded int64
}

func (m *opMetrics) OpFinished(kind, outcome string, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d < 0 {
		outcome += " (negative duration)"
	}
	m.ops[kind+"/"+outcome]++
}

func (m *opMetrics) SnapshotUploaded(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.uploaded += n
}

func (m *opMetrics) PlacementQueued(kind string)  { m.count("queued/" + kind) }
func (m *opMetrics) PlacementRefused(kind string) { m.count("refused/" + kind) }
func (m *opMetrics) SessionEvicted()              { m.count("evicted") }

func (m *opMetrics) count(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ops[k]++
}

func (m *opMetrics) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m.ops)) {
		fmt.Fprintf(&b, "%s=%d ", k, m.ops[k])
	}
	fmt.Fprintf(&b, "uploaded=%d", m.uploaded)
	return b.String()
}

// opsDone waits until every op of the session has finished.
func opsDone(t *testing.T, co *coordinator.Coordinator, st store.Store, id domain.SessionID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ops, err := st.ListOps(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if _, _, err := co.WaitOp(ctx, op); err != nil {
			t.Fatalf("op %s (%s): %v", op.ID, op.Kind, err)
		}
	}
}

// TestOpsAreMeasured: every op's outcome is counted by kind, and each
// committed snapshot's uploaded bytes (the fake host uploads 10).
func TestOpsAreMeasured(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		cfg   coordinator.Config
		hosts int // 0: none
		down  int // calls to the host that find no link
		run   func(t *testing.T, e *coordinatortest.Env, id domain.SessionID)
		want  string
	}{
		{"create, suspend, resume", coordinator.Config{}, 1, 0, func(t *testing.T, e *coordinatortest.Env, id domain.SessionID) {
			e.Wait(t, id, domain.SessionActive)
			if _, _, err := e.Co.Suspend(context.Background(), id); err != nil {
				t.Fatal(err)
			}
			e.Wait(t, id, domain.SessionIdle)
			if _, err := e.Co.Resume(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}, "create/succeeded=1 evict/succeeded=1 resume/succeeded=1 uploaded=10"},
		{"unreachable host", coordinator.Config{}, 1, 2, func(t *testing.T, e *coordinatortest.Env, id domain.SessionID) {
			e.Wait(t, id, domain.SessionActive)
		}, "create/retried=2 create/succeeded=1 uploaded=0"},
		{"no host", coordinator.Config{PlacementWait: 50 * time.Millisecond}, 0, 0, func(t *testing.T, e *coordinatortest.Env, id domain.SessionID) {
			e.Wait(t, id, domain.SessionDead)
		}, "create/failed=1 uploaded=0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &opMetrics{ops: map[string]int{}}
			e := coordinatortest.New(t, tc.cfg, func(store.Store, *coordinatortest.Fleet) coordinator.Deps {
				return coordinator.Deps{Metrics: m}
			})
			if tc.hosts > 0 {
				id, _ := e.AddHost(t, "a", 4)
				e.Fleet.Down(id, tc.down)
			}
			s, err := e.Co.CreateSession(context.Background(), domain.SessionSpec{IdleTimeoutSec: -1}, "")
			if err != nil {
				t.Fatal(err)
			}
			tc.run(t, e, s.ID)
			opsDone(t, e.Co, e.St, s.ID)
			if got := m.String(); got != tc.want {
				t.Fatalf("measured %s, want %s", got, tc.want)
			}
		})
	}
}
