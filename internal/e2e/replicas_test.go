package e2e

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/testutil"
)

// TestTwoReplicasOnPostgres: a host linked to replica B is reached through
// replica A for create, exec and delete, and each replica sees the other's
// sessions.
func TestTwoReplicasOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testutil.NewPostgresDB(t)
	stA, stB := openPostgres(t, url), openPostgres(t, url)
	creds := credentials(t, stA, "h1")
	const secret = "cluster-secret-for-tests"
	a := startReplica(t, stA, secret, coordinator.Config{Workers: 2})
	b := startReplica(t, stB, secret, coordinator.Config{Workers: 2})
	startHostInProcess(t, b.URL, creds.HostToken)
	ca, cb := newClient(a.URL, creds.Token), newClient(b.URL, creds.Token)
	eventually(t, 20e9, "host ready", func() (bool, string) {
		h, err := ca.Hosts().Get(ctx, creds.HostID)
		return err == nil && h.State == "ready", h.State
	})

	for i := range 3 { // several, so op claims land on both replicas
		s, err := ca.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("create %d via A: %+v %v", i, s, err)
		}
		var out bytes.Buffer
		code, err := ca.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"echo", "via-a"}}, &out, io.Discard)
		if err != nil || code != 0 || out.String() != "via-a\n" {
			t.Fatalf("exec via A: %d %v %q", code, err, out.String())
		}
		got, err := cb.Sessions().Get(ctx, s.ID)
		if err != nil || got.State != "active" {
			t.Fatalf("B sees %+v %v", got, err)
		}
		if err := ca.Sessions().Delete(ctx, s.ID, true); err != nil {
			t.Fatal(err)
		}
		if got, _ := cb.Sessions().Get(ctx, s.ID); got.State != "completed" {
			t.Fatalf("B sees %s after delete via A", got.State)
		}
	}
}
