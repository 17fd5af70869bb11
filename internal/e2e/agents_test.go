package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/chunk"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/harness"
	"github.com/engrams/engrams/internal/image/imagetest"
	"github.com/engrams/engrams/internal/modeltest"
	"github.com/engrams/engrams/internal/server"
)

// agentCase is one real agent CLI driven by a scripted provider.
type agentCase struct {
	harness    string // built-in harness name
	version    string
	secretKind string
	baseURL    func(srv *modeltest.Server) string // the provider base URL the gateway forwards to
	script     func(repoDir string) []modeltest.Turn
	tool       string // the tool the script calls to write hello.txt
}

// prompt is the i-th benchmark prompt: a command for the shell harness,
// text the script answers for the others.
func (ac agentCase) prompt(i int) string {
	if ac.harness == harness.BuiltinShell {
		return fmt.Sprintf("echo bench-%d", i)
	}
	return fmt.Sprintf("bench prompt %d", i)
}

var (
	claudeCase = agentCase{
		harness: "claude-code", version: modeltest.ClaudeVersion, secretKind: "anthropic_api_key",
		baseURL: func(s *modeltest.Server) string { return s.URL() },
		script: func(repo string) []modeltest.Turn {
			return []modeltest.Turn{ // followup first: a new session's prompt also quotes the first one
				{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
				{Name: "write", When: modeltest.UserTextContains("create hello.txt with hi"), Text: "I'll create the file.",
					ToolCalls: []modeltest.ToolCall{{Name: "Write", Input: map[string]any{"file_path": repo + "/hello.txt", "content": "hi\n"}}}},
				{Name: "done", When: modeltest.ToolResultFrom("Write"), Text: "Created hello.txt containing hi."},
			}
		},
		tool: "Write",
	}
	// shellCase is the shell harness: no model, no credential.
	shellCase = agentCase{harness: harness.BuiltinShell, version: harness.ShellVersion,
		script: func(string) []modeltest.Turn { return nil }}
	codexCase = agentCase{
		harness: "codex", version: modeltest.CodexVersion, secretKind: "openai_api_key",
		baseURL: func(s *modeltest.Server) string { return s.URL() + "/v1" },
		script: func(string) []modeltest.Turn {
			call := modeltest.ToolCall{Name: "apply_patch", Input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"}
			return []modeltest.Turn{
				{Name: "followup", When: modeltest.UserTextContains("what did you create"), Text: "Earlier I created hello.txt."},
				{Name: "write", When: modeltest.UserTextContains("create hello.txt with hi"), Text: "Creating hello.txt.", ToolCalls: []modeltest.ToolCall{call}},
				{Name: "done", When: modeltest.ToolResultFrom("apply_patch"), Text: "Created hello.txt containing hi."},
			}
		},
		tool: "apply_patch",
	}
)

// agentEnv is a coordinator, a QEMU host, a Debian image with git, a git
// server with one repository and a scripted provider.
type agentEnv struct {
	*imageEnv
	git     *gitServer
	hostDir string // the QEMU host agent's data dir
	repoURL string
	model   *modeltest.Server
	key     string
}

const agentImage = "debian-git"

func startAgentEnv(t *testing.T, ac agentCase, opts ...func(*server.Config, *server.Deps)) *agentEnv {
	t.Helper()
	requireQEMU(t)
	reg := imagetest.StartRegistry(t, imagetest.RegistryOptions{})
	reg.Push(t, "team/debian-git", "12", imagetest.DebianWith(t, "git"))
	e := startImageEnv(t, opts...)
	hostDir := e.startQEMUHost(t)
	if _, job := e.enable(t, apiv1.EnableImageRequest{Ref: reg.Ref("team/debian-git", "12"), Name: agentImage, MemoryMiB: 1024, DiskGiB: 2}); job.State != "ready" {
		t.Fatalf("enable: %+v", job)
	}
	ctx := context.Background()
	if _, err := e.c.Harnesses().Build(ctx, apiv1.BuildHarnessRequest{Name: ac.harness, Version: ac.version}); err != nil {
		t.Fatalf("build harness %s: %v", ac.harness, err)
	}
	a := &agentEnv{imageEnv: e, hostDir: hostDir, git: startGitServer(t, "git", "git-secret-pass"), key: "sk-real-" + strings.Repeat("7f3a", 8)}
	a.repoURL = a.git.repo(t, "app", map[string]string{"README.md": "# app\n"})
	a.model = modeltest.Start(t, modeltest.Config{APIKey: a.key, Script: ac.script("/work/app"), XShouldRetry: "false", Logf: t.Logf})
	a.secret(t, "git", "git_https", "git-secret-pass", apiv1.SecretMeta{Username: "git", Host: strings.TrimPrefix(a.git.URL, "http://")})
	return a
}

func (a *agentEnv) secret(t *testing.T, name, kind, value string, meta apiv1.SecretMeta) {
	t.Helper()
	if _, err := a.c.Secrets().Create(context.Background(), apiv1.CreateSecretRequest{Name: name, Kind: kind, Value: value, Meta: meta}); err != nil {
		t.Fatalf("create secret %s: %v", name, err)
	}
}

// profile makes a profile of the env's image, the case's harness, the
// repository and the model credential named cred.
func (a *agentEnv) profile(t *testing.T, name string, ac agentCase, cred string) {
	t.Helper()
	spec := apiv1.ProfileSpec{Image: agentImage, Harness: ac.harness, Repos: []apiv1.ProfileRepo{{URL: a.repoURL, Credential: "git"}}}
	if cred != "" {
		spec.Credentials = []string{cred}
	}
	_, err := a.c.Profiles().Create(context.Background(), apiv1.CreateProfileRequest{Name: name, Spec: spec})
	if err != nil {
		t.Fatalf("create profile %s: %v", name, err)
	}
}

// waitTurn follows a task's events after after until an idle event and
// returns the events seen and when the first assistant_text came.
func waitTurn(t *testing.T, c *client.Client, id string, after int64, limit time.Duration) ([]apiv1.TaskEvent, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var evs []apiv1.TaskEvent
	var first time.Time
	err := c.Tasks().Events(ctx, id, after, true, func(e apiv1.TaskEvent) error {
		evs = append(evs, e)
		t.Logf("task event %d %s %s", e.Seq, e.Type, short(e.Data))
		switch e.Type {
		case "assistant_text":
			if first.IsZero() {
				first = time.Now()
			}
		case "idle", "setup_failed", "stopped":
			return client.ErrStopFollowing
		}
		return nil
	})
	if err != nil {
		t.Fatalf("follow task %s: %v (events so far %d)", id, err, len(evs))
	}
	return evs, first
}

func short(raw json.RawMessage) string {
	if len(raw) > 300 {
		return string(raw[:300]) + "…"
	}
	return string(raw)
}

func hasEvent(evs []apiv1.TaskEvent, typ, contains string) bool {
	for _, e := range evs {
		if e.Type == typ && strings.Contains(string(e.Data), contains) {
			return true
		}
	}
	return false
}

// TestTaskClaudeCode and TestTaskCodex: the real CLI in a QEMU guest,
// pointed at the model gateway, writes hello.txt in a repository cloned
// from a local git server; task diff shows it; after a suspend, a
// follow-up resumes the session and the provider sees the earlier turns;
// the real key reaches the provider and appears nowhere in the guest
// (env, files, processes, the memory and disk of its snapshot).
func TestTaskClaudeCode(t *testing.T) { t.Parallel(); runAgentTask(t, claudeCase) }
func TestTaskCodex(t *testing.T)      { t.Parallel(); runAgentTask(t, codexCase) }

func runAgentTask(t *testing.T, ac agentCase) {
	a := startAgentEnv(t, ac)
	ctx := context.Background()
	a.secret(t, "model", ac.secretKind, a.key, apiv1.SecretMeta{BaseURL: ac.baseURL(a.model)})
	a.profile(t, "agent", ac, "model")

	started := time.Now()
	task, err := a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "agent", Prompt: "create hello.txt with hi"})
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	evs, first := waitTurn(t, a.c, task.ID, 0, 10*time.Minute)
	t.Logf("%s: task start -> first assistant text %s, -> idle %s", ac.harness, first.Sub(started), time.Since(started))
	for _, want := range []string{"run_started", "tool_call", "assistant_text", "idle"} {
		if !hasEvent(evs, want, "") {
			t.Fatalf("no %s event among %d", want, len(evs))
		}
	}
	if !hasEvent(evs, "file_changed", "hello.txt") {
		t.Errorf("no file_changed event for hello.txt")
	}
	var buf bytes.Buffer
	if _, err := a.c.Tasks().File(ctx, task.ID, "app/hello.txt", &buf); err != nil || buf.String() != "hi\n" {
		t.Fatalf("hello.txt in the clone: %q, %v", buf.String(), err)
	}
	diff, err := a.c.Tasks().Diff(ctx, task.ID)
	if err != nil || len(diff.Repos) != 1 || !strings.Contains(diff.Repos[0].Patch(), "+++ b/app/hello.txt") || !strings.Contains(diff.Repos[0].Diff, "+hi") {
		t.Fatalf("task diff: %+v, %v", diff, err)
	}

	cur, _ := a.c.Tasks().Get(ctx, task.ID)
	if s, err := a.c.Sessions().Suspend(ctx, cur.SessionID, true); err != nil || s.State != "idle" {
		t.Fatalf("suspend the task's session: %+v %v", s, err)
	}
	checkKeyNotInSnapshot(t, a, domain.SessionID(cur.SessionID), a.key, "create hello.txt with hi")
	before := len(a.model.ModelRequests())
	sentAt := time.Now()
	sent, err := a.c.Tasks().Send(ctx, task.ID, "what did you create?")
	if err != nil {
		t.Fatalf("send follow-up: %v", err)
	}
	evs, first = waitTurn(t, a.c, task.ID, sent.Seq, 10*time.Minute)
	t.Logf("%s: follow-up to the suspended session (resume included) -> first assistant text %s", ac.harness, first.Sub(sentAt))
	if !hasEvent(evs, "assistant_text", "Earlier I created hello.txt") {
		t.Fatalf("follow-up answer missing among %d events", len(evs))
	}
	assertConversationContinued(t, a.model.ModelRequests()[before:], a.key, ac.tool)
	checkKeyNotInGuest(t, a, cur.SessionID, a.key, "create hello.txt with hi")

	// The session is gone (deleted here; a host lost before any snapshot
	// ends it Dead): a follow-up continues the task in a new session,
	// which gets the conversation so far with the prompt.
	if err := a.c.Sessions().Delete(ctx, cur.SessionID, true); err != nil {
		t.Fatalf("delete the task's session: %v", err)
	}
	before = len(a.model.ModelRequests())
	sent, err = a.c.Tasks().Send(ctx, task.ID, "what did you create before?")
	if err != nil {
		t.Fatalf("send to a task whose session is gone: %v", err)
	}
	if evs, _ = waitTurn(t, a.c, task.ID, sent.Seq, 10*time.Minute); !hasEvent(evs, "assistant_text", "Earlier I created hello.txt") {
		t.Fatalf("no answer in the new session among %d events", len(evs))
	}
	if got, _ := a.c.Tasks().Get(ctx, task.ID); got.SessionID == cur.SessionID || len(got.Sessions) != 2 {
		t.Fatalf("task after continuing: session %s, sessions %v", got.SessionID, got.Sessions)
	}
	var carried bool
	for _, r := range a.model.ModelRequests()[before:] {
		carried = carried || (r.Turn == "followup" && strings.Contains(r.LatestUserText(), "create hello.txt with hi") &&
			strings.Contains(r.LatestUserText(), "Earlier I created hello.txt."))
	}
	if !carried {
		t.Fatalf("the new session's harness did not get the conversation so far")
	}
}

// assertConversationContinued: the follow-up's model request carries the
// first turn (prompt, tool call and its result) and the real key.
func assertConversationContinued(t *testing.T, reqs []modeltest.Request, key, tool string) {
	t.Helper()
	for _, r := range reqs {
		if r.Turn != "followup" {
			continue
		}
		if r.APIKey != key {
			t.Errorf("the provider got key %q, want the real key", r.APIKey)
		}
		var prompt, call bool
		for _, m := range r.Messages {
			prompt = prompt || (m.Role == "user" && strings.Contains(m.Text, "create hello.txt with hi"))
			for _, c := range m.ToolCalls {
				call = call || c.Name == tool
			}
		}
		if !prompt || !call {
			t.Fatalf("the follow-up request lacks the earlier turn: prompt=%v tool call=%v", prompt, call)
		}
		return
	}
	t.Fatalf("no follow-up model request among %d", len(reqs))
}

// checkKeyNotInGuest looks for a real secret in the running guest: the
// environment and command line of every process, the process list and
// every file. The secret is passed in two halves and joined by the shell,
// so no scanning process carries it in its own argv. proof is text the
// guest holds: the scan must find it, or it proves nothing.
func checkKeyNotInGuest(t *testing.T, a *agentEnv, sessionID, secret, proof string) {
	t.Helper()
	script := `k="$1$2"; found=0
has() { case "$1" in *"$k"*) return 0;; esac; return 1; }
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do
	if has "$(tr '\0' ' ' < "$f" 2>/dev/null)"; then echo "in $f"; found=1; fi
done
ps -eo args > /tmp/ps.out 2>/dev/null; while IFS= read -r l; do if has "$l"; then echo "in ps: $l"; found=1; fi; done < /tmp/ps.out; rm -f /tmp/ps.out
for f in $(grep -rlaF --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -e "$1" / 2>/dev/null); do
	if has "$(tr '\0' ' ' < "$f")"; then echo "in file $f"; found=1; fi
done
echo "found=$found"`
	scan := func(needle string) string {
		t.Helper()
		half := len(needle) / 2
		var out, errb bytes.Buffer
		code, err := a.c.Sessions().Exec(context.Background(), sessionID, apiv1.ExecRequest{Argv: []string{"/bin/sh", "-c", script, "sh", needle[:half], needle[half:]},
			TimeoutMS: 300000}, &out, &errb)
		if err != nil || code != 0 {
			t.Fatalf("scan the guest: %d %v %s", code, err, errb.String())
		}
		return out.String()
	}
	if out := scan(secret); !strings.Contains(out, "found=0") {
		t.Fatalf("the real secret is in the guest:\n%s", out)
	}
	if out := scan(proof); !strings.Contains(out, "found=1") {
		t.Fatalf("the scan did not find %q either: it proves nothing\n%s", proof, out)
	}
}

// checkKeyNotInSnapshot restores the session's head snapshot (memory,
// device state and disk) from its chunks and scans every byte for a real
// secret; proof must be found.
func checkKeyNotInSnapshot(t *testing.T, a *agentEnv, sessionID domain.SessionID, secret, proof string) {
	t.Helper()
	s, err := a.st.GetSession(context.Background(), sessionID)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.st.GetSnapshot(context.Background(), s.HeadSnapshotID)
	if err != nil {
		t.Fatal(err)
	}
	var mans map[string]chunk.Manifest
	if err := json.Unmarshal(snap.Manifests, &mans); err != nil {
		t.Fatal(err)
	}
	bs, err := localdir.New(localdir.Config{Dir: a.blobs}, localdir.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	control := 0 // the prompt must be found: the scan reads what the guest kept
	for role, m := range mans {
		cs, err := chunk.New(chunk.Config{ChunkSize: m.ChunkSize}, chunk.Deps{Blob: bs})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, role)
		err = cs.Restore(context.Background(), m, p)
		cs.Close()
		if err != nil {
			t.Fatalf("restore %s of snapshot %s: %v", role, snap.ID, err)
		}
		if n := countInFile(t, p, []byte(secret)); n > 0 {
			t.Fatalf("the real secret is %d times in the snapshot's %s", n, role)
		}
		control += countInFile(t, p, []byte(proof))
		_ = os.Remove(p)
	}
	if control == 0 {
		t.Fatalf("the scan of snapshot %s found not even %q: it proves nothing", snap.ID, proof)
	}
	t.Logf("snapshot %s (%d files) scanned: no secret; %q %d times", snap.ID, len(mans), proof, control)
}

// countInFile counts needle in a file, reading it in pieces.
func countInFile(t *testing.T, p string, needle []byte) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 8<<20+len(needle))
	n, carry := 0, 0
	for {
		k, err := io.ReadFull(f, buf[carry:])
		data := buf[:carry+k]
		n += bytes.Count(data, needle) // the carried tail is shorter than needle: nothing counts twice
		if err != nil {
			return n
		}
		carry = copy(buf, data[len(data)-(len(needle)-1):])
	}
}

// TestTaskWrongKey: a profile whose model key the provider refuses gives
// an auth error event in the task within seconds of the run starting, not
// a hang.
func TestTaskWrongKey(t *testing.T) {
	t.Parallel()
	a := startAgentEnv(t, claudeCase)
	ctx := context.Background()
	a.secret(t, "wrong", claudeCase.secretKind, "sk-wrong-key", apiv1.SecretMeta{BaseURL: claudeCase.baseURL(a.model)})
	a.profile(t, "wrong", claudeCase, "wrong")
	task, err := a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "wrong", Prompt: "create hello.txt with hi"})
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	evs, _ := waitTurn(t, a.c, task.ID, 0, 10*time.Minute)
	var run, authErr time.Time
	for _, e := range evs {
		switch {
		case e.Type == "run_started" && run.IsZero():
			run = e.Time
		case e.Type == "error" && strings.Contains(string(e.Data), `"auth"`):
			authErr = e.Time
		}
	}
	if authErr.IsZero() {
		t.Fatalf("no auth error event among %d events", len(evs))
	}
	t.Logf("run started -> auth error event: %s", authErr.Sub(run))
	if d := authErr.Sub(run); d > time.Minute {
		t.Fatalf("the auth error came %s after the run started", d)
	}
	got, err := a.c.Tasks().Get(ctx, task.ID)
	if err != nil || !strings.Contains(got.Error, "auth") {
		t.Fatalf("task after the auth error: %+v %v", got, err)
	}
}
