package cli_test

import (
	"encoding/json"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
)

// newSnapServer returns a fake holding s1 (active, snapshot snap1, outbox
// items p1 durable and p2 delivered), s2 (suspended: idle at snap2) and s3
// (completed).
func newSnapServer(t *testing.T) *clienttest.Server {
	t.Helper()
	srv := newServer(t)
	ctx := t.Context()
	c := client.New(srv.URL, clienttest.Token)
	steps := []func() error{
		func() error {
			_, err := c.Sessions().PutOutbox(ctx, "s1", apiv1.OutboxRequest{ID: "p1", Kind: "prompt", Payload: json.RawMessage(`{"text":"hi"}`)})
			return err
		},
		func() error { _, err := c.Sessions().Snapshot(ctx, "s1"); return err },
		func() error {
			_, err := c.Sessions().PutOutbox(ctx, "s1", apiv1.OutboxRequest{ID: "p2", Kind: "prompt"})
			return err
		},
		func() error { _, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true); return err },
		func() error { _, err := c.Sessions().Suspend(ctx, "s2", true); return err },
		func() error { _, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true); return err },
		func() error { return c.Sessions().Delete(ctx, "s3", true) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
	return srv
}

func failSnapshots(_ *testing.T, srv *clienttest.Server) { srv.FailSnapshots("disk full") }

func TestSnapshotCommands(t *testing.T) {
	t.Parallel()
	runTable(t, newSnapServer, []cmdTest{
		{name: "suspend", args: []string{"session", "suspend", "s1"},
			stdout: "suspended s1 at snapshot snap3; it resumes when used, or with `engrams session resume s1`\n"},
		{name: "suspend json", args: []string{"session", "suspend", "--json", "s1"},
			contains: []string{`"state": "idle"`, `"head_snapshot_id": "snap3"`}},
		{name: "suspend no wait", args: []string{"session", "suspend", "--no-wait", "s1"}, stdout: "suspending s1\n"},
		{name: "suspend idle", args: []string{"session", "suspend", "s2"},
			stdout: "suspended s2 at snapshot snap2; it resumes when used, or with `engrams session resume s2`\n"},
		{name: "suspend completed", args: []string{"session", "suspend", "s3"}, code: 1,
			errContain: []string{"error: suspend session s3: session s3 is completed; only an active session can be suspended (HTTP 409 conflict)\n",
				"hint: only an active session can be suspended; see `engrams session get ID`\n"}},
		{name: "suspend unknown", args: []string{"session", "suspend", "zz"}, code: 1,
			errContain: []string{"session zz not found", "hint: list sessions with `engrams session list`"}},
		{name: "suspend no id", args: []string{"session", "suspend"}, code: 2, errContain: []string{"hint: see `engrams session suspend --help`"}},
		{name: "suspend fails", args: []string{"session", "suspend", "s1"}, setup: failSnapshots, code: 1,
			errContain: []string{"error: session s1 is active, not idle, after suspend: suspend failed: disk full\n",
				"hint: see `engrams session get s1` for its snapshots and operations\n"}},
		{name: "resume", args: []string{"session", "resume", "s2"}, stdout: "session s2 is active on host h1\n"},
		{name: "resume active", args: []string{"session", "resume", "s1"}, stdout: "session s1 is active on host h1\n"},
		{name: "resume json", args: []string{"session", "resume", "--json", "s2"}, contains: []string{`"state": "active"`, `"epoch": 2`}},
		{name: "resume completed", args: []string{"session", "resume", "s3"}, code: 1,
			errContain: []string{"error: resume session s3: session s3 is completed (HTTP 409 conflict)\n",
				"hint: only an idle or active session can be resumed"}},
		{name: "snapshot", args: []string{"session", "snapshot", "s1"}, stdout: "snapshot snap3: 1.0 GiB, 4.0 MiB uploaded\n"},
		{name: "snapshot json", args: []string{"--json", "session", "snapshot", "s1"},
			contains: []string{`"id": "snap3"`, `"parent_id": "snap1"`, `"reason": "snapshot"`, `"bytes": 1073741824`, `"uploaded": 4194304`}},
		{name: "snapshot idle", args: []string{"session", "snapshot", "s2"}, code: 1,
			errContain: []string{"session s2 is idle (HTTP 409 conflict)", "hint: only an active session can be snapshotted"}},
		{name: "snapshot fails", args: []string{"session", "snapshot", "s1"}, setup: failSnapshots, code: 1,
			errContain: []string{"error: snapshot session s1: disk full (HTTP 500 internal)\n"}},
		{name: "get snapshots", args: []string{"session", "get", "s1"},
			contains: []string{"Head snapshot:  snap1\n", "Last activity:  2026-11-30 06:00:00 (0s ago)\n", "\nSnapshots:\n" +
				"ID     CREATED              REASON    HOST  SIZE     UPLOADED\n" +
				"snap1  2026-11-30 06:01:00  snapshot  h1    1.0 GiB  256.0 MiB\n"}},
		{name: "get idle", args: []string{"session", "get", "s2"},
			contains: []string{"State:          idle (desired: idle)\n", "Host:           -\n", "Head snapshot:  snap2\n",
				"snap2  2026-11-30 06:02:00  suspend  h1    1.0 GiB  256.0 MiB\n"}},
		{name: "get json snapshots", args: []string{"--json", "session", "get", "s2"},
			contains: []string{`"head_snapshot_id": "snap2"`, `"snapshots": [`, `"reason": "suspend"`, `"last_activity": "2026-11-30T06:00:00Z"`}},
		{name: "host cached snapshots", args: []string{"host", "get", "h1"}, contains: []string{"Cached snapshots:  snap1, snap2\n"}},
		{name: "outbox send", args: []string{"session", "outbox", "send", "s1", "--id", "p3", "--kind", "prompt", "--payload", `{"text":"go"}`},
			stdout: "outbox item p3 (seq 3) is pending\n"},
		{name: "outbox send again", args: []string{"session", "outbox", "send", "s1", "--id", "p1", "--kind", "prompt"},
			stdout: "outbox item p1 (seq 1) is durable\n"},
		{name: "outbox send json", args: []string{"session", "outbox", "send", "--json", "s2", "--id", "x", "--kind", "ping"},
			contains: []string{`"seq": 1`, `"id": "x"`, `"kind": "ping"`, `"state": "pending"`}},
		{name: "outbox send bad payload", args: []string{"session", "outbox", "send", "s1", "--id", "x", "--kind", "k", "--payload", "hi"}, code: 2,
			errContain: []string{"error: --payload: not valid JSON", "hint: see `engrams session outbox send --help`"}},
		{name: "outbox send no id", args: []string{"session", "outbox", "send", "s1", "--kind", "k"}, code: 2,
			errContain: []string{`required flag(s) "id" not set`}},
		{name: "outbox send completed", args: []string{"session", "outbox", "send", "s3", "--id", "x", "--kind", "k"}, code: 1,
			errContain: []string{"error: send x to session s3: session s3 is completed (HTTP 409 conflict)", "hint: the session is not in a state"}},
		{name: "outbox list", args: []string{"session", "outbox", "list", "s1"},
			stdout: "SEQ  ID  KIND    STATE      CREATED              PAYLOAD\n" +
				"1    p1  prompt  durable    2026-11-30 06:00:00  {\"text\":\"hi\"}\n" +
				"2    p2  prompt  delivered  2026-11-30 06:00:01  -\n"},
		{name: "outbox list json empty", args: []string{"session", "outbox", "ls", "--json", "s2"}, stdout: "{\n  \"items\": [],\n  \"next_cursor\": \"\"\n}\n"},
		{name: "outbox list unknown", args: []string{"session", "outbox", "list", "zz"}, code: 1, errContain: []string{"hint: list sessions"}},
		{name: "create idle timeout", args: []string{"session", "create", "--json", "--idle-timeout", "15m"}, contains: []string{`"idle_timeout_s": 900`}},
		{name: "create idle timeout rounds up", args: []string{"session", "create", "--json", "--idle-timeout", "1.5s"}, contains: []string{`"idle_timeout_s": 2`}},
		{name: "create idle never", args: []string{"session", "create", "--json", "--idle-timeout", "never"}, contains: []string{`"idle_timeout_s": -1`}},
		{name: "create idle default", args: []string{"session", "create", "--idle-timeout", "0"}, stdout: "s4\n"},
		{name: "create idle too short", args: []string{"session", "create", "--idle-timeout", "500ms"}, code: 2,
			errContain: []string{`--idle-timeout "500ms": want a duration of at least 1s`}},
		{name: "create idle bad", args: []string{"session", "create", "--idle-timeout", "soon"}, code: 2,
			errContain: []string{`--idle-timeout "soon"`, "hint: see `engrams session create --help`"}},
		{name: "suspend help", args: []string{"session", "suspend", "--help"}, contains: []string{"content-addressed chunks", "--no-wait", "Examples:"}},
	})
}

// TestSuspendOutcomes: a suspend that a request resumed right after its
// snapshot committed reports that snapshot and succeeds; one a delete took
// first says so and fails.
func TestSuspendOutcomes(t *testing.T) {
	t.Parallel()
	runTable(t, newSnapServer, []cmdTest{
		{name: "suspend raced by a resume", args: []string{"session", "suspend", "s1"},
			setup:  func(_ *testing.T, srv *clienttest.Server) { srv.RaceSuspend(apiv1.SuspendResumedSince) },
			stdout: "suspended s1 at snapshot snap3; a request resumed it since (it is active now)\n"},
		{name: "suspend raced by a resume json", args: []string{"session", "suspend", "--json", "s1"},
			setup:    func(_ *testing.T, srv *clienttest.Server) { srv.RaceSuspend(apiv1.SuspendResumedSince) },
			contains: []string{`"state": "active"`, `"result": "resumed_since"`, `"snapshot_id": "snap3"`}},
		{name: "suspend superseded", args: []string{"session", "suspend", "s1"}, code: 1,
			setup: func(_ *testing.T, srv *clienttest.Server) { srv.RaceSuspend(apiv1.SuspendSuperseded) },
			errContain: []string{"error: session s1 was not suspended: a destroy operation (op0) took the session first; it is completed\n",
				"hint: see `engrams session get s1` for its snapshots and operations\n"}},
	})
}
