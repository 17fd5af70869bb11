package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/engrams/engrams/internal/testutil"
)

// TestHostSessionScanUsesIndex checks that the heartbeat's scan,
// ListSessions{HostID, States}, reads sessions_host_state rather than every
// session a host ever ran: both columns are index conditions, with custom
// and with generic (cached) plans.
func TestHostSessionScanUsesIndex(t *testing.T) {
	t.Parallel()
	url := testutil.NewPostgresDB(t)
	open(t, url).Close() // migrate
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// 50 hosts with 400 sessions each, 1 in 100 of them still live.
	_, err = conn.Exec(t.Context(), `INSERT INTO sessions (id, state, desired_state, host_id, created_at, updated_at)
		SELECT 's' || g, CASE WHEN g % 100 = 0 THEN 'active' ELSE 'completed' END, 'active', 'host-' || (g % 50), 0, 0
		FROM generate_series(1, 20000) g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `ANALYZE sessions`); err != nil {
		t.Fatal(err)
	}
	// The shape sqlstore.ListSessions sends for {HostID, States: 2 states}.
	const q = `SELECT id, state FROM sessions WHERE host_id = $1 AND state IN ($2, $3) ORDER BY id`
	if _, err := conn.Exec(t.Context(), `PREPARE scan AS `+q); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"auto", "force_custom_plan", "force_generic_plan"} {
		if _, err := conn.Exec(t.Context(), `SET plan_cache_mode = `+mode); err != nil {
			t.Fatal(err)
		}
		// Past the five runs after which "auto" may switch to a generic plan.
		for range 6 {
			if _, err := conn.Exec(t.Context(), `EXECUTE scan('host-7', 'active', 'starting')`); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := conn.Query(t.Context(), `EXPLAIN EXECUTE scan('host-7', 'active', 'starting')`)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		plan := strings.Join(lines, "\n")
		t.Logf("%s:\n%s", mode, plan)
		if !strings.Contains(plan, "sessions_state_host") || !indexCondOnBoth(lines) {
			t.Errorf("%s: the scan does not look up host and state in sessions_state_host:\n%s", mode, plan)
		}
	}
}

// indexCondOnBoth reports whether an index condition of the plan names both
// host_id and state.
func indexCondOnBoth(plan []string) bool {
	for _, l := range plan {
		if strings.Contains(l, "Index Cond:") && strings.Contains(l, "host_id") && strings.Contains(l, "state") {
			return true
		}
	}
	return false
}
