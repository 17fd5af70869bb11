package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

type result struct {
	code           int
	stdout, stderr string
}

type env map[string]string

// run executes the CLI against srv. Unless env overrides them, ENGRAMS_URL
// and ENGRAMS_TOKEN point at srv and the config file does not exist.
func run(t *testing.T, srv *clienttest.Server, e env, stdin string, args ...string) result {
	t.Helper()
	vars := env{
		"ENGRAMS_URL":    srv.URL,
		"ENGRAMS_TOKEN":  clienttest.Token,
		"ENGRAMS_CONFIG": filepath.Join(t.TempDir(), "none.json"),
	}
	for k, v := range e {
		vars[k] = v
	}
	var out, errb bytes.Buffer
	root := cli.NewRoot(cli.Options{
		Version:      "v1.2.3-test",
		Stdin:        strings.NewReader(stdin),
		Stdout:       &out,
		Stderr:       &errb,
		Getenv:       func(k string) string { return vars[k] },
		Now:          func() time.Time { return clienttest.BaseTime() },
		Location:     time.UTC,
		PollInterval: time.Millisecond,
	})
	root.SetArgs(args)
	code := cli.Execute(t.Context(), root)
	return result{code, out.String(), errb.String()}
}

// newServer returns a fake holding session s1 (active, with 3 events).
func newServer(t *testing.T) *clienttest.Server {
	t.Helper()
	srv := clienttest.NewServer(t)
	c := client.New(srv.URL, clienttest.Token)
	if _, err := c.Sessions().Create(t.Context(), apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: "debian:12"}}, true); err != nil {
		t.Fatal(err)
	}
	srv.AddEvent("s1", "log", map[string]string{"line": "hello"})
	srv.AddEvent("s1", "op", map[string]string{"kind": "create", "state": "done"})
	return srv
}

func deadURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "http://" + ln.Addr().String()
}

// cmdTest is one CLI invocation against a fresh fake and what it must do.
type cmdTest struct {
	name       string
	env        env
	stdin      string
	args       []string
	setup      func(*testing.T, *clienttest.Server) // optional, before the command runs
	code       int
	stdout     string // exact, unless contains is set
	contains   []string
	errContain []string
	stderr     string // exact, when set
}

// runTable runs each test against its own server from newSrv.
func runTable(t *testing.T, newSrv func(*testing.T) *clienttest.Server, tests []cmdTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newSrv(t)
			if tt.setup != nil {
				tt.setup(t, srv)
			}
			got := run(t, srv, tt.env, tt.stdin, tt.args...)
			if got.code != tt.code {
				t.Errorf("exit code %d, want %d\nstdout: %s\nstderr: %s", got.code, tt.code, got.stdout, got.stderr)
			}
			if tt.contains == nil && got.stdout != tt.stdout {
				t.Errorf("stdout:\n%s\nwant:\n%s", got.stdout, tt.stdout)
			}
			for _, s := range tt.contains {
				if !strings.Contains(got.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, got.stdout)
				}
			}
			for _, s := range tt.errContain {
				if !strings.Contains(got.stderr, s) {
					t.Errorf("stderr lacks %q:\n%s", s, got.stderr)
				}
			}
			if tt.stderr != "" && got.stderr != tt.stderr {
				t.Errorf("stderr:\n%s\nwant:\n%s", got.stderr, tt.stderr)
			}
			if tt.errContain == nil && tt.stderr == "" && got.code == 0 && got.stderr != "" {
				t.Errorf("unexpected stderr: %s", got.stderr)
			}
		})
	}
}

// TestNoRoom: a create no host has room for says so, and when to retry.
func TestNoRoom(t *testing.T) {
	t.Parallel()
	runTable(t, newServer, []cmdTest{
		{name: "create without room", args: []string{"session", "create", "--image", "no-room"}, code: 1,
			errContain: []string{"error: create session: session s9 not started: no host has room: h1: 0 MiB free, 512 MiB asked (waited 1m0s in the queue); retry after 42s (HTTP 503 no_capacity)\n",
				"hint: no host has room; retry after 42 s"}},
	})
}

func TestCommands(t *testing.T) {
	t.Parallel()
	tests := []cmdTest{
		{name: "create", args: []string{"session", "create"}, stdout: "s2\n"},
		{name: "create json", args: []string{"session", "create", "--json", "--memory", "256", "--vcpus", "2", "--env", "A=1", "--image", "alpine"},
			contains: []string{`"id": "s2"`, `"memory_mib": 256`, `"vcpus": 2`, `"A": "1"`, `"image": "alpine"`, `"state": "active"`}},
		{name: "create no wait", args: []string{"session", "create", "--no-wait", "--json"}, contains: []string{`"state": "created"`}},
		{name: "create idempotent", args: []string{"session", "create", "--idempotency-key", "k", "--json"}, contains: []string{`"id": "s2"`}},
		{name: "create bad env", args: []string{"session", "create", "--env", "NOEQUALS"}, code: 2,
			errContain: []string{"error: --env \"NOEQUALS\": want KEY=VALUE\n", "hint: see `engrams session create --help`"}},
		{name: "list", args: []string{"session", "list"},
			stdout: "ID  STATE   HOST  IMAGE      MEMORY   VCPUS  CREATED\ns1  active  h1    debian:12  512 MiB  1      2026-11-30 06:00:00\n"},
		{name: "list state json", args: []string{"session", "list", "--state", "idle", "--json"}, stdout: "{\n  \"items\": [],\n  \"next_cursor\": \"\"\n}\n"},
		{name: "get", args: []string{"session", "get", "s1"},
			contains: []string{"ID:             s1\n", "State:          active (desired: active)\n", "Image:          debian:12\n",
				"Idle timeout:   server default\n", "Head snapshot:  -\n", "Last activity:  2026-11-30 06:00:00 (0s ago)\n",
				"Operations:\n", "op1  create  done"}},
		{name: "get json", args: []string{"--json", "session", "get", "s1"}, contains: []string{`"ops": [`, `"kind": "create"`}},
		{name: "get unknown", args: []string{"session", "get", "nope"}, code: 1,
			errContain: []string{"error: get session nope: session nope not found (HTTP 404 not_found)\nhint: list sessions with `engrams session list`\n"}},
		{name: "get no id", args: []string{"session", "get"}, code: 2, errContain: []string{"accepts 1 arg(s)", "hint: see `engrams session get --help`"}},
		{name: "exec", args: []string{"session", "exec", "s1", "--", "echo", "hi", "-n"}, stdout: "hi -n\n"},
		{name: "exec without dash dash", args: []string{"session", "exec", "s1", "echo", "-x"}, stdout: "-x\n"},
		{name: "exec exit code", args: []string{"session", "exec", "s1", "--", "exit", "3"}, code: 3, stdout: "bye\n"},
		{name: "exec cut short by a suspend", args: []string{"session", "exec", "s1", "--", "suspend-me"}, code: 1, stdout: "partial output\n",
			stderr: "error: exec in session s1: the session was suspended while the command ran; its output up to then is above\n" +
				"hint: run it again (that resumes a suspended session); `engrams session get s1` shows op op2\n"},
		{name: "exec stderr", args: []string{"session", "exec", "s1", "--", "err", "oops"}, errContain: []string{"oops\n"}},
		{name: "exec stdin pipe", stdin: "piped\n", args: []string{"session", "exec", "s1", "--", "cat"}, stdout: "piped\n"},
		{name: "exec env workdir", args: []string{"session", "exec", "--env", "B=2", "-e", "A=1", "--workdir", "/w", "s1", "--", "env"}, stdout: "A=1\nB=2\ndir=/w\n"},
		{name: "exec timeout", args: []string{"session", "exec", "--timeout", "1s", "s1", "--", "timeout"}, code: 124,
			stdout: "working\n", errContain: []string{"error: timed out\nhint: raise --timeout"}},
		{name: "exec cannot start", args: []string{"session", "exec", "s1", "--", "nope"}, code: 127, errContain: []string{"executable file not found"}},
		{name: "exec no command", args: []string{"session", "exec", "s1", "--"}, code: 2, errContain: []string{"no command given"}},
		{name: "exec unknown session", args: []string{"session", "exec", "zz", "--", "echo"}, code: 1,
			errContain: []string{"session zz not found", "hint: list sessions"}},
		{name: "logs", args: []string{"session", "logs", "s1"},
			stdout: "2026-11-30 06:00:00  state            {\"state\":\"active\"}\n" +
				"2026-11-30 06:00:01  log              {\"line\":\"hello\"}\n" +
				"2026-11-30 06:00:02  op               {\"kind\":\"create\",\"state\":\"done\"}\n"},
		{name: "logs json after", args: []string{"session", "logs", "--json", "--after", "2", "s1"},
			stdout: `{"seq":3,"type":"op","data":{"kind":"create","state":"done"},"time":"2026-11-30T06:00:02Z"}` + "\n"},
		{name: "delete", args: []string{"session", "delete", "s1"}, stdout: "deleted s1\n"},
		{name: "delete no wait", args: []string{"session", "rm", "--no-wait", "s1"}, stdout: "deleting s1\n"},
		{name: "host list", args: []string{"host", "list"},
			stdout: "ID  NAME   STATE  BACKEND  ACCEL  SESSIONS  LAST HEARTBEAT\nh1  kvm-1  ready  qemu     tcg    2/10      5s ago\n"},
		{name: "host get", args: []string{"host", "get", "h1"},
			contains: []string{"Backend:           qemu 7.2 (tcg, isolated)\n", "Backend reason:    firecracker: no binary; qemu: /dev/kvm unusable, TCG works\n",
				"Cached snapshots:  -\n",
				"Backends considered:\n", "firecracker  -        kvm    true       false   firecracker binary not found\n"}},
		{name: "host get unknown", args: []string{"host", "get", "zz"}, code: 1, errContain: []string{"hint: list hosts with `engrams host list`"}},
		{name: "host create", args: []string{"host", "create", "kvm-2"},
			contains: []string{"Host kvm-2 (h2) registered.", "  engrams_host_kvm-2\n", "engrams host run --coordinator http://127.0.0.1:", " --token engrams_host_kvm-2\n"}},
		{name: "host drain", args: []string{"host", "drain", "h1"}, stdout: "host h1 is draining: new sessions go elsewhere, its 2 sessions keep running\n"},
		{name: "host undrain", args: []string{"host", "undrain", "h1"}, stdout: "host h1 is ready: it takes new sessions again\n"},
		{name: "host disable by name", args: []string{"host", "disable", "kvm-1"},
			stdout: "host kvm-1 (h1) is disabled: its link is closed and its sessions were handed to recovery\n"},
		{name: "host enable json", args: []string{"host", "enable", "--json", "h1"}, contains: []string{`"id": "h1"`, `"state": "ready"`}},
		{name: "host delete", args: []string{"host", "delete", "kvm-1"},
			stdout: "host kvm-1 (h1) is deleted: its token is revoked, its link closed and its sessions were handed to recovery\n"},
		{name: "host delete unknown", args: []string{"host", "delete", "zz"}, code: 1, errContain: []string{"delete host zz", "hint: list hosts with `engrams host list`"}},
		{name: "host disable help", args: []string{"host", "disable", "--help"}, contains: []string{"Usage:\n  engrams host disable NAME|ID", "idle at its last snapshot", "Examples:"}},
		{name: "token create", args: []string{"token", "create", "ci"}, stdout: "engrams_secret_ci\n", errContain: []string{"token t1 (ci) created", "only this once"}},
		{name: "token list", args: []string{"token", "list", "--json"}, stdout: "{\n  \"items\": [],\n  \"next_cursor\": \"\"\n}\n"},
		{name: "token revoke unknown", args: []string{"token", "revoke", "t9"}, code: 1, errContain: []string{"hint: list tokens with `engrams token list`"}},
		{name: "version", args: []string{"version"},
			stdout: fmt.Sprintf("client: v1.2.3-test\nserver: v9.9.9-fake (host link protocol %d, guest API %d, replica r1)\n", hostlink.Version, guestapi.Version)},
		{name: "unauthorized", env: env{"ENGRAMS_TOKEN": "wrong"}, args: []string{"session", "list"}, code: 1,
			errContain: []string{"HTTP 401 unauthorized", "hint: create a token with `engrams token create` or run `engrams dev`"}},
		{name: "no url", env: env{"ENGRAMS_URL": ""}, args: []string{"session", "list"}, code: 1,
			errContain: []string{"no API URL: run `engrams dev`, or set --url or ENGRAMS_URL"}},
		{name: "unknown command", args: []string{"bogus"}, code: 2, errContain: []string{"unknown command \"bogus\"", "hint: see `engrams --help`"}},
		{name: "unknown subcommand", args: []string{"session", "bogus"}, code: 2, errContain: []string{"unknown command \"bogus\" for \"engrams session\""}},
		{name: "unknown flag", args: []string{"session", "list", "--bogus"}, code: 2, errContain: []string{"unknown flag: --bogus", "hint: see `engrams session list --help`"}},
		{name: "group help", args: []string{"session"}, contains: []string{"Available Commands:", "exec"}},
		{name: "help", args: []string{"session", "exec", "--help"}, contains: []string{"Examples:", "-it $id -- /bin/bash", "--timeout"}},
	}
	runTable(t, newServer, tests)
}

func TestLogsFollow(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	srv.DropAfter(1) // every connection drops after one event: the CLI must resume
	done := make(chan result, 1)
	go func() { done <- run(t, srv, nil, "", "session", "logs", "-f", "--json", "s1") }()
	srv.AddEvent("s1", "log", "live")
	// Wait until all 4 events went out, then end the session.
	deadline := time.After(10 * time.Second)
	for len(srv.LastEventIDs()) < 4 {
		select {
		case <-deadline:
			t.Fatalf("Last-Event-IDs so far: %q", srv.LastEventIDs())
		case <-time.After(5 * time.Millisecond):
		}
	}
	srv.SetSessionState("s1", "completed")
	got := <-done
	if got.code != 0 {
		t.Fatalf("code %d: %s", got.code, got.stderr)
	}
	var seqs []int64
	for line := range strings.Lines(got.stdout) {
		var ev apiv1.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, ev.Seq)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Errorf("seqs = %v, want [1 2 3 4]", seqs)
	}
	if ids := fmt.Sprint(srv.LastEventIDs()); !strings.HasPrefix(ids, "[ 1 2 3") {
		t.Errorf("Last-Event-IDs = %s, want [ 1 2 3 ...]", ids)
	}
}

func TestResolution(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := cli.WriteClientConfig(good, srv.URL, clienttest.Token); err != nil {
		t.Fatal(err)
	}
	badTok := filepath.Join(dir, "sub", "bad.json")
	if err := cli.WriteClientConfig(badTok, srv.URL, "wrong"); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.json")
	if err := os.WriteFile(broken, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := deadURL(t)
	tests := []struct {
		name string
		env  env
		args []string
		code int
		msg  string
	}{
		{"config file only", env{"ENGRAMS_URL": "", "ENGRAMS_TOKEN": "", "ENGRAMS_CONFIG": good}, nil, 0, ""},
		{"env beats config", env{"ENGRAMS_TOKEN": "wrong", "ENGRAMS_CONFIG": good}, nil, 1, "401"},
		{"env token fills config url", env{"ENGRAMS_URL": "", "ENGRAMS_CONFIG": badTok}, nil, 0, ""},
		{"flag beats env", env{"ENGRAMS_TOKEN": "wrong"}, []string{"--token", clienttest.Token}, 0, ""},
		{"url flag beats env", nil, []string{"--url", dead}, 1, "is `engrams dev` running? set --url or ENGRAMS_URL"},
		{"broken config", env{"ENGRAMS_URL": "", "ENGRAMS_CONFIG": broken}, nil, 1, "fix or delete it"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := run(t, srv, tt.env, "", append(tt.args, "session", "list")...)
			if got.code != tt.code || !strings.Contains(got.stderr, tt.msg) {
				t.Errorf("code %d stderr %q; want %d with %q", got.code, got.stderr, tt.code, tt.msg)
			}
		})
	}
	for _, p := range []string{good, badTok} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v; want 0600", p, fi.Mode(), err)
		}
	}
}

func TestHooks(t *testing.T) {
	t.Parallel()
	var ran []string
	agent := &cobra.Command{Use: "agent [flags]", RunE: func(cmd *cobra.Command, args []string) error {
		tok, _ := cmd.Flags().GetString("token")
		ran = append(ran, "agent "+tok)
		return nil
	}}
	agent.Flags().String("coordinator", "", "")
	agent.Flags().String("token", "", "host token")
	dev := &cobra.Command{Use: "dev", RunE: func(*cobra.Command, []string) error { ran = append(ran, "dev"); return nil }}
	var out bytes.Buffer
	root := cli.NewRoot(cli.Options{HostAgent: agent, Stdout: &out, Stderr: &out, Getenv: func(string) string { return "" }}, dev)
	for _, args := range [][]string{{"host", "run", "--coordinator", "http://x", "--token", "T"}, {"dev"}} {
		root.SetArgs(args)
		if code := cli.Execute(t.Context(), root); code != 0 {
			t.Fatalf("%v: code %d: %s", args, code, out.String())
		}
	}
	if fmt.Sprint(ran) != "[agent T dev]" {
		t.Errorf("ran %v", ran)
	}
	if agent.Use != "run [flags]" {
		t.Errorf("agent Use = %q", agent.Use)
	}
	if cmd, _, err := cli.NewRoot(cli.Options{}).Find([]string{"host", "run"}); err == nil && cmd.Name() == "run" {
		t.Error("NewRoot without HostAgent has `host run`")
	}
}

// TestHelpEverywhere checks every command explains itself with examples.
func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if c.Name() == "help" || c.Name() == "completion" || (c.HasParent() && c.Parent().Name() == "completion") {
			return
		}
		if c.Short == "" || c.Long == "" {
			t.Errorf("%s: no Short or Long help", c.CommandPath())
		}
		if c.Example == "" && !c.HasSubCommands() {
			t.Errorf("%s: no examples", c.CommandPath())
		}
	}
	walk(cli.NewRoot(cli.Options{}))
}
