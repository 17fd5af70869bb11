package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// TestSessionEndToEnd walks one session through the whole path on SQLite:
// API → coordinator → host link → host → process backend → guest daemon.
func TestSessionEndToEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	creds := credentials(t, st, "h1")
	r := startReplica(t, st, "", coordinator.Config{})
	startHostInProcess(t, r.URL, creds.HostToken)
	c := newClient(r.URL, creds.Token)

	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Env: map[string]string{"GREETING": "hi"}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != "active" || s.HostID != creds.HostID {
		t.Fatalf("created session %+v; want active on %s", s, creds.HostID)
	}

	var out, errb bytes.Buffer
	code, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", `echo $GREETING; echo oops >&2; exit 3`}}, &out, &errb)
	if err != nil || code != 3 || out.String() != "hi\n" || errb.String() != "oops\n" {
		t.Fatalf("exec = %d, %v, stdout %q, stderr %q; want 3, hi, oops", code, err, out.String(), errb.String())
	}

	out.Reset()
	ctl, err := c.Sessions().ExecWS(ctx, s.ID, apiv1.ExecStart{Argv: []string{"sh", "-c", "tr a-z A-Z"}, Stdin: true}, strings.NewReader("piped\n"), &out, io.Discard, nil)
	if err != nil || ctl.ExitCode != 0 || out.String() != "PIPED\n" {
		t.Fatalf("exec ws = %+v, %v, %q", ctl, err, out.String())
	}

	dir := fmt.Sprintf("/tmp/engrams-e2e-%s", s.ID) // the process backend shares the host filesystem
	t.Cleanup(func() {
		_, _ = c.Sessions().Exec(context.Background(), s.ID, apiv1.ExecRequest{Argv: []string{"rm", "-rf", dir}}, io.Discard, io.Discard)
	})
	if err := c.Files().Put(ctx, s.ID, dir+"/f.txt", 0o640, strings.NewReader("content")); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := c.Files().Get(ctx, s.ID, dir+"/f.txt", &got); err != nil || got.String() != "content" {
		t.Fatalf("get file %q, %v", got.String(), err)
	}
	if fi, err := c.Files().Stat(ctx, s.ID, dir+"/f.txt"); err != nil || fi.Size != 7 {
		t.Fatalf("stat %+v, %v", fi, err)
	}

	if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	s, err = c.Sessions().Get(ctx, s.ID)
	if err != nil || s.State != "completed" {
		t.Fatalf("after delete: %+v, %v", s, err)
	}
	var types []string
	err = c.Sessions().Events(ctx, s.ID, 0, true, func(e apiv1.Event) error { types = append(types, e.Type); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(types) < 5 || types[0] != "created" {
		t.Fatalf("events %v", types)
	}
	if _, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); !client.IsConflict(err) {
		t.Fatalf("exec on a completed session: %v, want conflict", err)
	}
}

// TestBadInputChangesNothing sends malformed, unauthenticated and unknown
// requests: each gets a clear 4xx and no session appears.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	st := openSQLite(t)
	creds := credentials(t, st, "")
	r := startReplica(t, st, "", coordinator.Config{PlacementWait: time.Second})
	// A session the caller sees: a request's shape is judged once the
	// session it names is known to be the caller's (another's is 404).
	mine, _, _, err := st.CreateSession(t.Context(), store.NewSession{ID: "s-mine", OpID: "op-mine",
		Spec: domain.SessionSpec{Owner: domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path, token, body string
		want                            int
		wantText                        string
	}{
		{"no token", "GET", "/v1/sessions", "", "", 401, "missing API key"},
		{"wrong token", "GET", "/v1/sessions", "egr_nope", "", 401, "not valid"},
		{"unknown session", "GET", "/v1/sessions/nope", creds.Token, "", 404, "not found"},
		{"unknown session exec", "POST", "/v1/sessions/nope/exec", creds.Token, `{"argv":["true"]}`, 404, "not found"},
		{"unknown session delete", "DELETE", "/v1/sessions/nope", creds.Token, "", 404, "not found"},
		{"malformed json", "POST", "/v1/sessions", creds.Token, `{"memory_mib":`, 400, "malformed JSON"},
		{"unknown field", "POST", "/v1/sessions", creds.Token, `{"memroy_mib":256}`, 400, "unknown field"},
		{"trailing data", "POST", "/v1/sessions", creds.Token, `{} {}`, 400, "trailing data"},
		{"bad memory", "POST", "/v1/sessions", creds.Token, `{"memory_mib":1}`, 400, "memory_mib must be between"},
		{"oversized body", "POST", "/v1/sessions", creds.Token, `{"env":{"A":"` + strings.Repeat("x", 2<<20) + `"}}`, 413, "over"},
		{"bad state filter", "GET", "/v1/sessions?state=bogus", creds.Token, "", 400, "unknown state"},
		{"empty argv", "POST", "/v1/sessions/" + string(mine.ID) + "/exec", creds.Token, `{"argv":[]}`, 400, "argv"},
		{"bad host name", "POST", "/v1/hosts", creds.Token, `{"name":"a b"}`, 400, "name may contain"},
		{"bad last-event-id", "GET", "/v1/sessions/" + string(mine.ID) + "/events?after=-1", creds.Token, "", 400, "non-negative"},
		{"no route", "GET", "/v1/nothing", creds.Token, "", 404, "no route"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req, _ := http.NewRequest(tt.method, r.URL+tt.path, strings.NewReader(tt.body))
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.want || !strings.Contains(string(b), tt.wantText) || !strings.Contains(string(b), `"code"`) {
				t.Fatalf("%s %s = %d %s; want %d containing %q", tt.method, tt.path, resp.StatusCode, b, tt.want, tt.wantText)
			}
		})
	}
	t.Cleanup(func() {
		ss, err := newClient(r.URL, creds.Token).Sessions().List(context.Background(), client.SessionFilter{})
		if err != nil || len(ss) != 1 || ss[0].ID != string(mine.ID) {
			t.Errorf("bad input left %d sessions besides the test's own (%v)", len(ss)-1, err)
		}
	})
}

// TestHostKilledSessionsDieAndStayDead: two host agents as processes; kill
// -9 one; its sessions become HostLost → Dead within the interval; the other
// host's sessions are untouched; restarting the killed host neither revives
// its sessions nor leaves their guest processes running.
func TestHostKilledSessionsDieAndStayDead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	credsA := credentials(t, st, "host-a")
	credsB := credentials(t, st, "host-b")
	lostAfter := 1500 * time.Millisecond
	r := startReplica(t, st, "", coordinator.Config{HeartbeatInterval: 250 * time.Millisecond, HostLostAfter: lostAfter, MonitorInterval: 100 * time.Millisecond})
	dirA, dirB := shortTempDir(t), shortTempDir(t)
	a := startHostProcess(t, r.URL, credsA.HostToken, dirA)
	startHostProcess(t, r.URL, credsB.HostToken, dirB)
	c := newClient(r.URL, credsA.Token)
	eventually(t, 20*time.Second, "both hosts ready", func() (bool, string) {
		hs, err := c.Hosts().List(ctx)
		n := 0
		for _, h := range hs {
			if h.State == "ready" {
				n++
			}
		}
		return err == nil && n == 2, fmt.Sprintf("%d ready, %v", n, err)
	})

	onHost := map[string][]string{}
	for range 4 {
		s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true)
		if err != nil || s.State != "active" {
			t.Fatalf("create: %+v %v", s, err)
		}
		onHost[s.HostID] = append(onHost[s.HostID], s.ID)
	}
	if len(onHost[credsA.HostID]) == 0 || len(onHost[credsB.HostID]) == 0 {
		t.Fatalf("placement did not spread: %v", onHost)
	}
	guestPIDs := map[string]int{}
	for _, id := range onHost[credsA.HostID] {
		var out bytes.Buffer
		if _, err := c.Sessions().Exec(ctx, id, apiv1.ExecRequest{Argv: []string{"sh", "-c", "echo $PPID"}}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		var pid int
		fmt.Sscan(strings.TrimSpace(out.String()), &pid)
		guestPIDs[id] = pid
	}

	killed := time.Now()
	a.kill()
	for _, id := range onHost[credsA.HostID] {
		eventually(t, lostAfter+10*time.Second, "session on killed host dead", func() (bool, string) {
			s, err := c.Sessions().Get(ctx, id)
			return err == nil && s.State == "dead", fmt.Sprintf("%s %q %v", s.State, s.Reason, err)
		})
	}
	t.Logf("sessions dead %s after kill -9 (HostLostAfter %s)", time.Since(killed).Round(10*time.Millisecond), lostAfter)
	for _, id := range onHost[credsB.HostID] {
		if _, err := c.Sessions().Exec(ctx, id, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err != nil {
			t.Fatalf("session %s on the surviving host: %v", id, err)
		}
	}

	startHostProcess(t, r.URL, credsA.HostToken, dirA)
	eventually(t, 20*time.Second, "restarted host reaps its old guests", func() (bool, string) {
		for id, pid := range guestPIDs {
			if syscall.Kill(pid, 0) == nil {
				return false, fmt.Sprintf("guest of %s (pid %d) still running", id, pid)
			}
		}
		return true, ""
	})
	for _, id := range onHost[credsA.HostID] {
		if s, _ := c.Sessions().Get(ctx, id); s.State != "dead" {
			t.Fatalf("session %s came back as %s", id, s.State)
		}
	}
}
