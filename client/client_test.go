package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/clienttest"
	"github.com/engrams/engrams/internal/guestapi"
)

func newClient(t *testing.T) (*client.Client, *clienttest.Server) {
	t.Helper()
	srv := clienttest.NewServer(t)
	return client.New(srv.URL, clienttest.Token, client.WithReconnect(time.Millisecond, 3)), srv
}

func TestSessions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, srv := newClient(t)

	s1, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{
		SessionSpec:    apiv1.SessionSpec{MemoryMiB: 256, VCPUs: 2, Env: map[string]string{"A": "1"}, Image: "debian"},
		IdempotencyKey: "k1",
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s1.State != "active" || s1.Spec.MemoryMiB != 256 || s1.Spec.Env["A"] != "1" {
		t.Errorf("created %+v", s1)
	}
	again, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{IdempotencyKey: "k1"}, true)
	if err != nil || again.ID != s1.ID {
		t.Errorf("idempotent create = %v, %v; want %s", again.ID, err, s1.ID)
	}
	s2, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, false)
	if err != nil || s2.State != "created" {
		t.Fatalf("create without wait = %+v, %v", s2, err)
	}
	if !slices.Contains(srv.Requests(), "POST /v1/sessions?wait=false") {
		t.Errorf("requests %v lack wait=false", srv.Requests())
	}

	tests := []struct {
		filter client.SessionFilter
		want   []string
	}{
		{client.SessionFilter{}, []string{s2.ID, s1.ID}},
		{client.SessionFilter{State: "active"}, []string{s1.ID}},
		{client.SessionFilter{HostID: "nope"}, nil},
	}
	for _, tt := range tests {
		l, err := c.Sessions().List(ctx, tt.filter)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range l {
			ids = append(ids, s.ID)
		}
		if !slices.Equal(ids, tt.want) {
			t.Errorf("list %+v = %v, want %v", tt.filter, ids, tt.want)
		}
	}

	got, err := c.Sessions().Get(ctx, s1.ID)
	if err != nil || len(got.Ops) != 1 || got.Ops[0].Kind != "create" {
		t.Errorf("get = %+v, %v", got, err)
	}
	if err := c.Sessions().Delete(ctx, s1.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Sessions().Get(ctx, s1.ID); got.State != "completed" {
		t.Errorf("after delete state = %s", got.State)
	}
	if err := c.Sessions().Delete(ctx, s2.ID, false); err != nil {
		t.Fatal(err)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := clienttest.NewServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + ln.Addr().String()
	ln.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway from a proxy", http.StatusBadGateway)
	}))
	t.Cleanup(plain.Close)

	tests := []struct {
		name  string
		c     *client.Client
		call  func(context.Context, *client.Client) error
		check func(error) bool
		msg   string
	}{
		{"not found", client.New(srv.URL, clienttest.Token),
			func(ctx context.Context, c *client.Client) error { _, err := c.Sessions().Get(ctx, "nope"); return err },
			client.IsNotFound, "session nope not found"},
		{"unauthorized", client.New(srv.URL, "wrong"),
			func(ctx context.Context, c *client.Client) error {
				_, err := c.Sessions().List(ctx, client.SessionFilter{})
				return err
			},
			client.IsUnauthorized, "HTTP 401"},
		{"bad request", client.New(srv.URL, clienttest.Token),
			func(ctx context.Context, c *client.Client) error { _, err := c.Hosts().Create(ctx, ""); return err },
			func(err error) bool { return client.HasCode(err, client.CodeBadRequest) }, "name is required"},
		{"no room", client.New(srv.URL, clienttest.Token),
			func(ctx context.Context, c *client.Client) error {
				_, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{Image: clienttest.NoRoomImage}}, true)
				return err
			},
			func(err error) bool { d, ok := client.NoCapacity(err); return ok && d == 42*time.Second }, "no host has room"},
		{"non-JSON error", client.New(plain.URL, ""),
			func(ctx context.Context, c *client.Client) error { _, err := c.Version(ctx); return err },
			client.IsUnavailable, "bad gateway from a proxy"},
		{"unreachable", client.New(deadURL, ""),
			func(ctx context.Context, c *client.Client) error { _, err := c.Version(ctx); return err },
			func(err error) bool { var u *client.UnreachableError; return errors.As(err, &u) },
			"is `engrams dev` running? set --url or ENGRAMS_URL"},
		{"unreachable exec ws", client.New(deadURL, ""),
			func(ctx context.Context, c *client.Client) error {
				_, err := c.Sessions().ExecWS(ctx, "s1", apiv1.ExecStart{Argv: []string{"true"}}, nil, nil, nil, nil)
				return err
			},
			func(err error) bool { var u *client.UnreachableError; return errors.As(err, &u) }, "engrams dev"},
		{"no URL", client.New("", ""),
			func(ctx context.Context, c *client.Client) error { _, err := c.Version(ctx); return err },
			func(err error) bool { return err != nil }, "ENGRAMS_URL"},
		{"bad URL", client.New("localhost:7070", ""),
			func(ctx context.Context, c *client.Client) error { _, err := c.Version(ctx); return err },
			func(err error) bool { return err != nil }, "want http://HOST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call(t.Context(), tt.c)
			if err == nil || !tt.check(err) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %v (%T), want one containing %q", err, err, tt.msg)
			}
		})
	}
}

func TestExec(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	s, err := c.Sessions().Create(t.Context(), apiv1.CreateSessionRequest{}, true)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name           string
		req            apiv1.ExecRequest
		stdout, stderr string
		code           int
		timedOut       bool
		failed         bool
	}{
		{"stdout", apiv1.ExecRequest{Argv: []string{"echo", "hi", "there"}}, "hi there\n", "", 0, false, false},
		{"stderr", apiv1.ExecRequest{Argv: []string{"err", "oops"}}, "", "oops\n", 0, false, false},
		{"exit code", apiv1.ExecRequest{Argv: []string{"exit", "3"}}, "bye\n", "", 3, false, false},
		{"stdin", apiv1.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("in\x00put")}, "in\x00put", "", 0, false, false},
		{"env and dir", apiv1.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"B": "2", "A": "1"}, Dir: "/w"}, "A=1\nB=2\ndir=/w\n", "", 0, false, false},
		{"timeout", apiv1.ExecRequest{Argv: []string{"timeout"}, TimeoutMS: 5}, "working\n", "", -1, true, true},
		{"cannot start", apiv1.ExecRequest{Argv: []string{"nope"}}, "", "", 127, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code, err := c.Sessions().Exec(t.Context(), s.ID, tt.req, &out, &errb)
			var fe *client.ExecFailedError
			if failed := errors.As(err, &fe); failed != tt.failed || (failed && fe.TimedOut != tt.timedOut) {
				t.Errorf("err = %v, want failed=%v timedOut=%v", err, tt.failed, tt.timedOut)
			} else if err != nil && !tt.failed {
				t.Errorf("err = %v", err)
			}
			if code != tt.code || out.String() != tt.stdout || errb.String() != tt.stderr {
				t.Errorf("got code %d stdout %q stderr %q, want %d %q %q", code, out.String(), errb.String(), tt.code, tt.stdout, tt.stderr)
			}
		})
	}
}

func TestExecStreamWithoutExit(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"type":"stdout","data":"aGk="}`)
	}))
	t.Cleanup(srv.Close)
	var out bytes.Buffer
	_, err := client.New(srv.URL, "").Sessions().Exec(t.Context(), "s", apiv1.ExecRequest{Argv: []string{"x"}}, &out, nil)
	if !errors.Is(err, client.ErrNoExit) || out.String() != "hi" {
		t.Errorf("err = %v, out %q; want ErrNoExit after %q", err, out.String(), "hi")
	}
}

func TestExecWS(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t)
	s, err := c.Sessions().Create(t.Context(), apiv1.CreateSessionRequest{}, true)
	if err != nil {
		t.Fatal(err)
	}
	resized := make(chan [2]uint16, 1)
	resized <- [2]uint16{50, 132}
	signals := make(chan string, 1)
	signals <- "SIGINT"
	tests := []struct {
		name           string
		start          apiv1.ExecStart
		io             client.ExecIO
		stdout, stderr string
		exit           apiv1.ExecControl
	}{
		{"output", apiv1.ExecStart{Argv: []string{"echo", "hi"}}, client.ExecIO{}, "hi\n", "", apiv1.ExecControl{Type: "exit"}},
		{"stderr apart", apiv1.ExecStart{Argv: []string{"err", "bad"}}, client.ExecIO{}, "", "bad\n", apiv1.ExecControl{Type: "exit"}},
		{"exit code", apiv1.ExecStart{Argv: []string{"exit", "3"}}, client.ExecIO{}, "bye\n", "", apiv1.ExecControl{Type: "exit", ExitCode: 3}},
		{"stdin", apiv1.ExecStart{Argv: []string{"cat"}}, client.ExecIO{Stdin: strings.NewReader("typed\n")}, "typed\n", "", apiv1.ExecControl{Type: "exit"}},
		{"no stdin", apiv1.ExecStart{Argv: []string{"cat"}}, client.ExecIO{}, "", "", apiv1.ExecControl{Type: "exit"}},
		{"tty resize", apiv1.ExecStart{Argv: []string{"tty"}, TTY: true, Rows: 24, Cols: 80}, client.ExecIO{Resize: resized},
			"tty=true rows=24 cols=80\nresize 50 132\n", "", apiv1.ExecControl{Type: "exit"}},
		{"signal", apiv1.ExecStart{Argv: []string{"wait-signal"}}, client.ExecIO{Signal: signals}, "got SIGINT\n", "", apiv1.ExecControl{Type: "exit", ExitCode: 130}},
		{"timeout", apiv1.ExecStart{Argv: []string{"timeout"}}, client.ExecIO{}, "working\n", "",
			apiv1.ExecControl{Type: "exit", ExitCode: -1, Error: "timed out", TimedOut: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			tt.io.Stdout, tt.io.Stderr = &out, &errb
			exit, err := c.Sessions().ExecWSIO(t.Context(), s.ID, tt.start, tt.io)
			if err != nil {
				t.Fatal(err)
			}
			if exit != tt.exit || out.String() != tt.stdout || errb.String() != tt.stderr {
				t.Errorf("got %+v stdout %q stderr %q; want %+v %q %q", exit, out.String(), errb.String(), tt.exit, tt.stdout, tt.stderr)
			}
		})
	}

	t.Run("plain ExecWS", func(t *testing.T) {
		t.Parallel()
		var out bytes.Buffer
		exit, err := c.Sessions().ExecWS(t.Context(), s.ID, apiv1.ExecStart{Argv: []string{"cat"}}, strings.NewReader("abc"), &out, io.Discard, nil)
		if err != nil || exit.ExitCode != 0 || out.String() != "abc" {
			t.Errorf("ExecWS = %+v, %v, %q", exit, err, out.String())
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		t.Parallel()
		_, err := c.Sessions().ExecWS(t.Context(), "nope", apiv1.ExecStart{Argv: []string{"echo"}}, nil, nil, nil, nil)
		if !client.IsNotFound(err) {
			t.Errorf("err = %v, want not found", err)
		}
	})
}

func TestFiles(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, _ := newClient(t)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Files().Put(ctx, s.ID, "/w/a.sh", 0o755, strings.NewReader("#!/bin/sh\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.Files().Put(ctx, s.ID, "/w/b.txt", 0, strings.NewReader("b")); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := c.Files().Get(ctx, s.ID, "/w/a.sh", &buf); err != nil || buf.String() != "#!/bin/sh\n" {
		t.Errorf("get = %q, %v", buf.String(), err)
	}
	fi, err := c.Files().Stat(ctx, s.ID, "/w/a.sh")
	if err != nil || fi.Mode != "-rwxr-xr-x" || fi.Size != 10 {
		t.Errorf("stat = %+v, %v", fi, err)
	}
	l, err := c.Files().List(ctx, s.ID, "/w")
	if err != nil || len(l) != 2 || l[0].Name != "a.sh" || l[1].Mode != "-rw-r--r--" {
		t.Errorf("list = %+v, %v", l, err)
	}
	if err := c.Files().Get(ctx, s.ID, "/missing", &buf); !client.IsNotFound(err) {
		t.Errorf("get missing: %v", err)
	}
}

func TestHostsAndTokens(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, _ := newClient(t)
	hr, err := c.Hosts().Create(ctx, "kvm-2")
	if err != nil || hr.Token == "" || hr.Host.State != "new" {
		t.Fatalf("create host = %+v, %v", hr, err)
	}
	hosts, err := c.Hosts().List(ctx)
	if err != nil || len(hosts) != 2 {
		t.Fatalf("list hosts = %+v, %v", hosts, err)
	}
	h, err := c.Hosts().Drain(ctx, "h1")
	if err != nil || h.State != "draining" {
		t.Errorf("drain = %+v, %v", h, err)
	}
	if h, err := c.Hosts().Get(ctx, "h1"); err != nil || h.State != "draining" || h.Facts.Backend.Name != "qemu" {
		t.Errorf("get host = %+v, %v", h, err)
	}
	if _, err := c.Hosts().Get(ctx, "zz"); !client.IsNotFound(err) {
		t.Errorf("get unknown host: %v", err)
	}
	if h, err := c.Hosts().Disable(ctx, "kvm-2"); err != nil || h.State != "disabled" || h.ID != hr.Host.ID {
		t.Errorf("disable by name = %+v, %v", h, err)
	}
	if h, err := c.Hosts().Enable(ctx, hr.Host.ID); err != nil || h.State != "ready" {
		t.Errorf("enable = %+v, %v", h, err)
	}
	if h, err := c.Hosts().Delete(ctx, "kvm-2"); err != nil || h.State != "deleted" || h.DeletedAt.IsZero() {
		t.Errorf("delete = %+v, %v", h, err)
	}
	if _, err := c.Hosts().Delete(ctx, hr.Host.ID); !client.IsNotFound(err) {
		t.Errorf("delete twice: %v", err)
	}
	if hosts, err := c.Hosts().List(ctx); err != nil || len(hosts) != 1 {
		t.Errorf("list after delete = %+v, %v", hosts, err)
	}

	tr, err := c.Tokens().Create(ctx, "ci")
	if err != nil || tr.Secret == "" {
		t.Fatalf("create token = %+v, %v", tr, err)
	}
	toks, err := c.Tokens().List(ctx)
	if err != nil || len(toks) != 1 || toks[0].Name != "ci" {
		t.Errorf("list tokens = %+v, %v", toks, err)
	}
	if err := c.Tokens().Revoke(ctx, tr.Token.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Tokens().Revoke(ctx, tr.Token.ID); !client.IsNotFound(err) {
		t.Errorf("revoke twice: %v", err)
	}
	v, err := c.Version(ctx)
	if err != nil || v.Version != "v9.9.9-fake" || v.GuestAPI != guestapi.Version {
		t.Errorf("version = %+v, %v", v, err)
	}
	doc, err := c.OpenAPI(ctx)
	if err != nil || !strings.HasPrefix(string(doc), "openapi:") {
		t.Errorf("openapi = %q, %v", doc, err)
	}
}

func TestSnapshots(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, srv := newClient(t)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{IdleTimeoutSec: -1}}, true)
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.IdleTimeoutSec != -1 {
		t.Errorf("idle timeout = %d, want -1", s.Spec.IdleTimeoutSec)
	}
	sn2 := checkSnapshotChain(t, c, s.ID)
	checkSuspendResume(t, c, srv, s, sn2)
	checkExecResumes(t, c, s.ID)
	if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	checkSnapshotRefusals(t, c, s.ID)
}

// checkSnapshotChain takes two snapshots of session id: the second has the
// first as parent and uploads only the changed chunks. It returns the second.
func checkSnapshotChain(t *testing.T, c *client.Client, id string) apiv1.Snapshot {
	t.Helper()
	ctx := t.Context()
	sn1, err := c.Sessions().Snapshot(ctx, id)
	if err != nil || sn1.ID == "" || sn1.Reason != "snapshot" || sn1.Uploaded != clienttest.FirstUpload || sn1.Bytes != clienttest.SnapshotBytes {
		t.Fatalf("snapshot = %+v, %v", sn1, err)
	}
	sn2, err := c.Sessions().Snapshot(ctx, id)
	if err != nil || sn2.ParentID != sn1.ID || sn2.Uploaded != clienttest.NextUpload {
		t.Fatalf("second snapshot = %+v, %v; want parent %s, only changed chunks uploaded", sn2, err, sn1.ID)
	}
	return sn2
}

// checkSuspendResume suspends active session s (its head snapshot sn2)
// twice, resumes it and suspends it again without waiting.
func checkSuspendResume(t *testing.T, c *client.Client, srv *clienttest.Server, s apiv1.Session, sn2 apiv1.Snapshot) {
	t.Helper()
	ctx := t.Context()
	idle, err := c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.State != "idle" || idle.HostID != "" || idle.HeadSnapshot == sn2.ID {
		t.Fatalf("suspend = %+v, %v", idle, err)
	}
	again, err := c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || again.State != "idle" || again.HeadSnapshot != idle.HeadSnapshot {
		t.Errorf("suspend idle = %+v, %v; want unchanged", again, err)
	}
	got, err := c.Sessions().Get(ctx, s.ID)
	if err != nil || len(got.Snapshots) != 3 || got.Snapshots[2].ID != idle.HeadSnapshot || got.Snapshots[2].Reason != "suspend" {
		t.Errorf("get = %+v, %v; want 3 snapshots, the last the head", got.Snapshots, err)
	}

	active, err := c.Sessions().Resume(ctx, s.ID)
	if err != nil || active.State != "active" || active.Epoch != s.Epoch+1 {
		t.Errorf("resume = %+v, %v", active, err)
	}
	if _, err := c.Sessions().Suspend(ctx, s.ID, false); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(srv.Requests(), "POST /v1/sessions/"+s.ID+"/suspend?wait=false") {
		t.Errorf("requests %v lack suspend?wait=false", srv.Requests())
	}
}

// checkExecResumes: exec on idle session id resumes it; the host then
// caches the four snapshots taken.
func checkExecResumes(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx := t.Context()
	var out bytes.Buffer
	if code, err := c.Sessions().Exec(ctx, id, apiv1.ExecRequest{Argv: []string{"echo", "back"}}, &out, nil); err != nil || code != 0 || out.String() != "back\n" {
		t.Errorf("exec on idle = %d, %v, %q", code, err, out.String())
	}
	if got, _ := c.Sessions().Get(ctx, id); got.State != "active" {
		t.Errorf("after exec state = %s, want active", got.State)
	}
	if h, err := c.Hosts().Get(ctx, "h1"); err != nil || len(h.Capacity.CachedSnapshots) != 4 {
		t.Errorf("host cached snapshots = %v, %v; want 4", h.Capacity.CachedSnapshots, err)
	}
}

// checkSnapshotRefusals: the snapshot routes refuse completed session id
// with a conflict, and an unknown session with not found.
func checkSnapshotRefusals(t *testing.T, c *client.Client, id string) {
	t.Helper()
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
	}{
		{"suspend completed", func() error { _, err := c.Sessions().Suspend(ctx, id, true); return err }},
		{"resume completed", func() error { _, err := c.Sessions().Resume(ctx, id); return err }},
		{"snapshot completed", func() error { _, err := c.Sessions().Snapshot(ctx, id); return err }},
		{"outbox to completed", func() error {
			_, err := c.Sessions().PutOutbox(ctx, id, apiv1.OutboxRequest{ID: "x", Kind: "prompt"})
			return err
		}},
	}
	for _, tt := range tests {
		if err := tt.call(); !client.IsConflict(err) {
			t.Errorf("%s: err = %v, want conflict", tt.name, err)
		}
	}
	for _, call := range []func() error{
		func() error { _, err := c.Sessions().Suspend(ctx, "nope", true); return err },
		func() error { _, err := c.Sessions().Resume(ctx, "nope"); return err },
		func() error { _, err := c.Sessions().Snapshot(ctx, "nope"); return err },
		func() error { _, err := c.Sessions().ListOutbox(ctx, "nope"); return err },
	} {
		if err := call(); !client.IsNotFound(err) {
			t.Errorf("unknown session: err = %v, want not found", err)
		}
	}
}

func TestOutbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c, _ := newClient(t)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{}, true)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := c.Sessions().ListOutbox(ctx, s.ID); err != nil || len(l) != 0 {
		t.Fatalf("empty outbox = %+v, %v", l, err)
	}
	tests := []struct {
		name    string
		req     apiv1.OutboxRequest
		seq     int64
		payload string
		badReq  bool
	}{
		{"first", apiv1.OutboxRequest{ID: "a", Kind: "prompt", Payload: []byte(`{"text":"hi"}`)}, 1, `{"text":"hi"}`, false},
		{"second", apiv1.OutboxRequest{ID: "b", Kind: "prompt"}, 2, "", false},
		{"same id again", apiv1.OutboxRequest{ID: "a", Kind: "other", Payload: []byte(`1`)}, 1, `{"text":"hi"}`, false},
		{"no id", apiv1.OutboxRequest{Kind: "prompt"}, 0, "", true},
		{"no kind", apiv1.OutboxRequest{ID: "c"}, 0, "", true},
	}
	for _, tt := range tests { // in order: seqs depend on it
		it, err := c.Sessions().PutOutbox(ctx, s.ID, tt.req)
		if tt.badReq {
			if !client.HasCode(err, client.CodeBadRequest) {
				t.Errorf("%s: err = %v, want bad_request", tt.name, err)
			}
			continue
		}
		if err != nil || it.Seq != tt.seq || it.ID != tt.req.ID || string(it.Payload) != tt.payload {
			t.Errorf("%s: put = %+v (payload %s), %v; want seq %d payload %q", tt.name, it, it.Payload, err, tt.seq, tt.payload)
		}
	}
	if _, err := c.Sessions().Snapshot(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sessions().Suspend(ctx, s.ID, true); err != nil {
		t.Fatal(err)
	}
	// Sending to an idle session resumes it and delivers the item.
	if _, err := c.Sessions().PutOutbox(ctx, s.ID, apiv1.OutboxRequest{ID: "c", Kind: "prompt"}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Sessions().ListOutbox(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range l {
		got = append(got, fmt.Sprintf("%d:%s:%s", it.Seq, it.ID, it.State))
	}
	if want := []string{"1:a:durable", "2:b:durable", "3:c:delivered"}; !slices.Equal(got, want) {
		t.Errorf("outbox = %v, want %v", got, want)
	}
	if s, _ := c.Sessions().Get(ctx, s.ID); s.State != "active" {
		t.Errorf("state after outbox put = %s, want active", s.State)
	}
}
