package sqlstore

import (
	"testing"

	"github.com/engrams/engrams/internal/hoststate"
)

// TestHostStateSQL pins the SQL generated from hoststate.Transition (the
// conformance suites check what it does on both dialects).
func TestHostStateSQL(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, got, want string }{
		{"lost if connected", hostStateAfter(hoststate.HeartbeatLost),
			"CASE hosts.state WHEN 'ready' THEN 'lost' WHEN 'draining' THEN 'lost' ELSE hosts.state END"},
		{"drain flag set", hostStateAfter(hoststate.DrainFlagSet),
			"CASE hosts.state WHEN 'ready' THEN 'draining' WHEN 'draining' THEN 'draining' ELSE hosts.state END"},
		{"registered per flag", hostStateAfterFlag(hoststate.Registered, hoststate.RegisteredDraining),
			"CASE WHEN hosts.draining THEN CASE hosts.state WHEN 'new' THEN 'draining' WHEN 'ready' THEN 'draining' " +
				"WHEN 'draining' THEN 'draining' WHEN 'lost' THEN 'draining' ELSE hosts.state END " +
				"ELSE CASE hosts.state WHEN 'new' THEN 'ready' WHEN 'ready' THEN 'ready' WHEN 'draining' THEN 'ready' " +
				"WHEN 'lost' THEN 'ready' ELSE hosts.state END END"},
		{"revive only a lost host", hostStateAllows(hoststate.Revived), "hosts.state IN ('lost')"},
		{"lose only a connected host", hostStateAllows(hoststate.HeartbeatLost), "hosts.state IN ('ready', 'draining')"},
		{"an event no state takes keeps the state", hostStateAfter("nothing"), "hosts.state"},
		{"an event no state takes matches no row", hostStateAllows("nothing"), "FALSE"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, tt.got, tt.want)
		}
	}
}
