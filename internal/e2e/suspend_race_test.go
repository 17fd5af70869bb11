package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/coordinator"
)

// syncBuffer is a buffer the CLI writes while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// runCLI runs the engrams CLI in this process against url; it returns the
// exit code.
func runCLI(ctx context.Context, url, token string, stdout, stderr *syncBuffer, args ...string) int {
	root := cli.NewRoot(cli.Options{
		Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
		Getenv: func(k string) string {
			return map[string]string{"ENGRAMS_URL": url, "ENGRAMS_TOKEN": token, "ENGRAMS_CONFIG": "/nonexistent/engrams.json"}[k]
		},
	})
	root.SetArgs(args)
	return cli.Execute(ctx, root)
}

// qemuSession starts a replica, a QEMU host and one active session that
// never idles; it returns the replica's URL, the user token and the client.
func qemuSession(t *testing.T) (string, string, *client.Client, apiv1.Session) {
	t.Helper()
	requireQEMU(t)
	st := openSQLite(t)
	creds := credentials(t, st, "vm")
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 500 * time.Millisecond, HostLostAfter: 30 * time.Second})
	dir := shortTempDir(t)
	t.Cleanup(func() {
		for _, pid := range vmmPIDs(dir) {
			_ = exec.Command("kill", "-9", fmt.Sprint(pid)).Run()
		}
	})
	startHostProcess(t, r.URL, creds.HostToken, dir, "--backend", "qemu", "--blob-dir", shortTempDir(t))
	c := newClient(r.URL, creds.Token)
	waitHostReady(t, c, creds.HostID)
	s, err := c.Sessions().Create(context.Background(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 256, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	return r.URL, creds.Token, c, s
}

// TestQEMUExecCutShortBySuspend: a command running in a real VM when the
// session is suspended: `session exec` prints the output it had and says
// the session was suspended under it (not that the stream merely ended).
func TestQEMUExecCutShortBySuspend(t *testing.T) {
	t.Parallel()
	url, token, c, s := qemuSession(t)
	ctx := context.Background()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- runCLI(ctx, url, token, &stdout, &stderr, "session", "exec", s.ID, "--", "sh", "-c", "echo started; sleep 600; echo never")
	}()
	eventually(t, 60*time.Second, "the command started", func() (bool, string) {
		return strings.Contains(stdout.String(), "started"), stdout.String() + stderr.String()
	})
	idle, err := c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.Suspend == nil || idle.Suspend.Result != apiv1.SuspendSuspended {
		t.Fatalf("suspend: %+v %v", idle, err)
	}
	if got := <-code; got != 1 {
		t.Errorf("exec exited %d, want 1", got)
	}
	if stdout.String() != "started\n" {
		t.Errorf("stdout %q, want the output up to the suspend", stdout.String())
	}
	if want := "the session was suspended while the command ran; its output up to then is above"; !strings.Contains(stderr.String(), want) ||
		!strings.Contains(stderr.String(), idle.Suspend.OpID) {
		t.Errorf("stderr %q; want %q naming op %s", stderr.String(), want, idle.Suspend.OpID)
	}
}

// TestQEMUSuspendRacedByExec: an exec arrives while a suspend snapshots a
// real VM; it waits, then resumes the session. `session suspend` still
// reports the snapshot it committed and exits 0, and the session, resumed
// by a request, is desired active again.
func TestQEMUSuspendRacedByExec(t *testing.T) {
	t.Parallel()
	url, token, c, s := qemuSession(t)
	ctx := context.Background()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() { code <- runCLI(ctx, url, token, &stdout, &stderr, "session", "suspend", s.ID) }()
	eventually(t, 60*time.Second, "the suspend under way", func() (bool, string) {
		got, err := c.Sessions().Get(ctx, s.ID)
		return err == nil && got.State != "active", fmt.Sprint(got.State, err)
	})
	var out, errb bytes.Buffer
	if n, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"echo", "back"}, TimeoutMS: 120000}, &out, &errb); err != nil ||
		n != 0 || out.String() != "back\n" {
		t.Fatalf("exec racing the suspend: %d %v %q %q", n, err, out.String(), errb.String())
	}
	if got := <-code; got != 0 {
		t.Fatalf("suspend exited %d: %s%s", got, stdout.String(), stderr.String())
	}
	got, err := c.Sessions().Get(ctx, s.ID)
	if err != nil || got.State != "active" || got.DesiredState != "active" || len(got.Snapshots) != 1 {
		t.Fatalf("after the exec: %+v %v; want active (desired: active) with the suspend's snapshot", got, err)
	}
	snap := got.Snapshots[0].ID
	said := stdout.String()
	if !strings.HasPrefix(said, "suspended "+s.ID+" at snapshot "+snap+"; ") ||
		!strings.Contains(said, "it resumes when used") && !strings.Contains(said, "a request resumed it since") {
		t.Errorf("suspend said %q; want it suspended at %s", said, snap)
	}
	t.Logf("suspend said: %s", strings.TrimSpace(said))
}
