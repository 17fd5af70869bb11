package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/testutil"
)

// fixedDialer dials every address at to: the broker's view of git.test.
type fixedDialer struct{ to string }

func (d fixedDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, d.to)
}

// TestBrokeredGitPushFromGuest (issues 14, 25): a task's repository on an
// HTTPS git host (git.test, its certificate from a CA the coordinator
// trusts), its profile granting push and API use, is cloned on the
// coordinator; in the QEMU guest, git pushes a commit with the session's
// placeholder, through the egress proxy and the host link to the
// credential broker, which verifies git.test and puts the real password
// in. The commit lands; a gh-style REST call for the repository gets
// through, one for the token's user is refused without reaching the host;
// the password is nowhere in the guest (processes, files, the memory and
// disk of its snapshot).
func TestBrokeredGitPushFromGuest(t *testing.T) {
	t.Parallel()
	ca := testutil.NewCA(t)
	pass := "gitpw-" + hex.EncodeToString(randomBytes(t, 12))
	gs, addr := startGitServerTLS(t, "git", pass, ca.Leaf(t, "git.test"), "git.test")
	repoURL := gs.repo(t, "acme/app", map[string]string{"README.md": "# app\n"})
	_, port, _ := net.SplitHostPort(addr)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startAgentEnv(t, shellCase, func(c *server.Config, d *server.Deps) {
		// The coordinator's clone and its broker reach git.test at the
		// test server and trust the test CA.
		c.Tasks.GitConfig = [][2]string{{"http.sslCAInfo", caFile}, {"http.curloptResolve", "git.test:" + port + ":127.0.0.1"}}
		d.GitHosts, d.BrokerRootCAs = fixedDialer{to: addr}, ca.Pool
	})
	ctx := context.Background()
	a.secret(t, "gh", "git_https", pass, apiv1.SecretMeta{Username: "git", Host: "git.test:" + port})
	if _, err := a.c.Profiles().Create(ctx, apiv1.CreateProfileRequest{Name: "pusher", Spec: apiv1.ProfileSpec{Image: agentImage,
		Harness: shellCase.harness, Repos: []apiv1.ProfileRepo{{URL: repoURL, Credential: "gh", Push: true, API: true}}}}); err != nil {
		t.Fatalf("create profile: %v", err)
	}
	const proof = "pushed-by-the-guest"
	push := "cd /work/app && echo " + proof + " > pushed.txt && git add pushed.txt && " +
		"git -c user.name=agent -c user.email=agent@example.test commit -qm 'from the guest' && git push origin HEAD 2>&1; echo push-exit=$?"
	task, err := a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "pusher", Prompt: push})
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	evs, _ := waitTurn(t, a.c, task.ID, 0, 10*time.Minute)
	if !hasEvent(evs, "brokered", "git.test:"+port) || !hasEvent(evs, "tool_result", "push-exit=0") {
		t.Fatalf("the push did not succeed: %d events (see the log above)", len(evs))
	}
	if got := gs.lastCommit(t, "acme/app", "main"); got != "from the guest" {
		t.Fatalf("the git host's main is at %q, want the guest's commit", got)
	}
	cur, err := a.c.Tasks().Get(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	waitBrokeredEvent(t, a.c, cur.SessionID, "git.test")
	// A gh-style API call for the repository: the harness has the
	// placeholder in gh's variables, and the broker puts the token in. One
	// for the token's user is outside the grant: refused, never sent.
	probe, err := os.Open(buildTestdata(t, "netget"))
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := a.c.Files().Put(ctx, cur.SessionID, "/tmp/netget", 0o755, probe); err != nil {
		t.Fatalf("upload netget: %v", err)
	}
	last := evs[len(evs)-1].Seq
	api := `export NETGET_AUTH="token $GH_ENTERPRISE_TOKEN"; /tmp/netget http "https://$GH_HOST/api/v3/repos/acme/app"; echo api-exit=$?; ` +
		`/tmp/netget http "https://$GH_HOST/api/v3/user"; echo user-exit=$?`
	if _, err := a.c.Tasks().Send(ctx, task.ID, api); err != nil {
		t.Fatalf("send the API calls: %v", err)
	}
	if evs, _ = waitTurn(t, a.c, task.ID, last, 5*time.Minute); !hasEvent(evs, "tool_result", `{\"full_name\":\"acme/app\"}`) ||
		!hasEvent(evs, "tool_result", "api-exit=0") {
		t.Fatalf("the gh-style API call did not get through: %d events (see the log above)", len(evs))
	}
	if !hasEvent(evs, "tool_result", "403 engrams credential broker: refused GET") || !hasEvent(evs, "tool_result", "user-exit=1") {
		t.Fatalf("the call for the token's user was not refused: %d events (see the log above)", len(evs))
	}
	if calls := gs.apiCalls(); !slices.Equal(calls, []string{"/api/v3/repos/acme/app"}) {
		t.Fatalf("the git host was asked %q, want only the repository's", calls)
	}
	waitEgressEvent(t, a.c, cur.SessionID, "git.test", "deny", `refused GET "/api/v3/user"`)
	checkKeyNotInGuest(t, a, cur.SessionID, pass, proof)
	if s, err := a.c.Sessions().Suspend(ctx, cur.SessionID, true); err != nil || s.State != "idle" {
		t.Fatalf("suspend the task's session: %+v %v", s, err)
	}
	checkKeyNotInSnapshot(t, a, domain.SessionID(cur.SessionID), pass, proof)
}

// waitBrokeredEvent waits for the broker's record of a request to host
// with the credential put in.
func waitBrokeredEvent(t *testing.T, c *client.Client, sid, host string) {
	t.Helper()
	waitEgressEvent(t, c, sid, host, "allow", "placeholder replaced by its credential")
}

// waitEgressEvent waits for an event of the session's egress log for host
// with verdict and a reason holding reason.
func waitEgressEvent(t *testing.T, c *client.Client, sid, host, verdict, reason string) {
	t.Helper()
	eventually(t, 30*time.Second, "the broker's event in the egress log", func() (bool, string) {
		l, err := c.Sessions().Egress(context.Background(), sid, client.EgressQuery{Limit: 200})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range l.Events {
			if e.Host == host && e.Verdict == verdict && strings.Contains(e.Reason, reason) {
				return true, ""
			}
			seen = append(seen, e.Host+" "+e.Verdict+" "+e.Reason)
		}
		return false, strings.Join(seen, "\n")
	})
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}
