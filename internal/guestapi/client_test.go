package guestapi_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
)

// startGuest serves a daemon on a Unix socket for one test and returns a
// client and the daemon's working directory.
func startGuest(t testing.TB) (*guestapi.Client, string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "eg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "g.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	srv := guest.New(guest.Config{
		WorkDir:  work,
		StateDir: filepath.Join(work, ".engrams-state"),
		Env:      []string{"PATH=" + os.Getenv("PATH"), "BASE_VAR=base", "OVERRIDDEN=base"},
	}, guest.Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	c := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(c.Close)
	return c, work
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestExec(t *testing.T) {
	t.Parallel()
	c, work := startGuest(t)
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB through stdin and back
	tests := []struct {
		name       string
		start      guestapi.ExecStart
		stdin      string
		wantOut    string
		wantErrOut string
		wantCode   int
		wantError  string // substring of Control.Error
		timedOut   bool
	}{
		{name: "stdout", start: guestapi.ExecStart{Argv: []string{"echo", "hello"}}, wantOut: "hello\n"},
		{name: "stderr", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "echo oops >&2"}}, wantErrOut: "oops\n"},
		{name: "exit code", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "exit 3"}}, wantCode: 3},
		{name: "stdin", start: guestapi.ExecStart{Argv: []string{"cat"}}, stdin: "piped\n", wantOut: "piped\n"},
		{name: "big stdin", start: guestapi.ExecStart{Argv: []string{"cat"}}, stdin: big, wantOut: big},
		{name: "no stdin is empty", start: guestapi.ExecStart{Argv: []string{"cat"}}, wantOut: ""},
		{name: "env merges over base", start: guestapi.ExecStart{
			Argv: []string{"sh", "-c", "echo $BASE_VAR $OVERRIDDEN $NEW_VAR"},
			Env:  map[string]string{"OVERRIDDEN": "over", "NEW_VAR": "new"},
		}, wantOut: "base over new\n"},
		{name: "default dir", start: guestapi.ExecStart{Argv: []string{"pwd"}}, wantOut: work + "\n"},
		{name: "dir", start: guestapi.ExecStart{Argv: []string{"pwd"}, Dir: "/"}, wantOut: "/\n"},
		{name: "timeout", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "echo before; sleep 30"}, TimeoutMS: 200},
			wantOut: "before\n", wantCode: 137, wantError: "timed out", timedOut: true},
		{name: "signal exit code", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "kill -TERM $$"}}, wantCode: 143},
		{name: "not found", start: guestapi.ExecStart{Argv: []string{"no-such-command-xyz"}}, wantCode: -1, wantError: "not found"},
		{name: "empty argv", start: guestapi.ExecStart{}, wantCode: -1, wantError: "argv is empty"},
		{name: "relative dir", start: guestapi.ExecStart{Argv: []string{"pwd"}, Dir: "rel"}, wantCode: -1, wantError: "dir must be absolute"},
		{name: "bad env name", start: guestapi.ExecStart{Argv: []string{"true"}, Env: map[string]string{"A=B": "x"}}, wantCode: -1, wantError: "invalid env name"},
		{name: "missing dir", start: guestapi.ExecStart{Argv: []string{"pwd"}, Dir: "/no/such/dir"}, wantCode: -1, wantError: "no such file"},
		{name: "tty size", start: guestapi.ExecStart{Argv: []string{"stty", "size"}, TTY: true, Rows: 33, Cols: 101}, wantOut: "33 101\r\n"},
		{name: "tty is a terminal", start: guestapi.ExecStart{Argv: []string{"sh", "-c", "test -t 0 && test -t 1 && echo tty"}, TTY: true}, wantOut: "tty\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdin io.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			var out, errOut bytes.Buffer
			began := time.Now()
			exit, err := c.Exec(testCtx(t), tt.start, stdin, &out, &errOut)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout = %.200q, want %.200q", out.String(), tt.wantOut)
			}
			if errOut.String() != tt.wantErrOut {
				t.Errorf("stderr = %q, want %q", errOut.String(), tt.wantErrOut)
			}
			if exit.Type != "exit" || exit.ExitCode != tt.wantCode || exit.TimedOut != tt.timedOut {
				t.Errorf("exit = %+v, want code %d timed_out %v", exit, tt.wantCode, tt.timedOut)
			}
			if !strings.Contains(exit.Error, tt.wantError) || (tt.wantError == "") != (exit.Error == "") {
				t.Errorf("exit error = %q, want it to contain %q", exit.Error, tt.wantError)
			}
			if tt.timedOut && time.Since(began) > 10*time.Second {
				t.Errorf("timeout took %v", time.Since(began))
			}
		})
	}
}

// notifyWriter records output and signals when it contains want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func newNotifyWriter(want string) *notifyWriter {
	return &notifyWriter{want: want, seen: make(chan struct{})}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

func TestExecStreamsOutputAsProduced(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	ctx := testCtx(t)
	p, err := c.Start(ctx, guestapi.ExecStart{Argv: []string{"sh", "-c", "echo first; read x; echo second $x"}, Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := newNotifyWriter("first\n")
	type result struct {
		exit guestapi.Control
		err  error
	}
	done := make(chan result, 1)
	go func() {
		exit, err := p.Wait(out, nil)
		done <- result{exit, err}
	}()
	select {
	case <-out.seen: // arrived while the command still waits for stdin
	case <-ctx.Done():
		t.Fatal("first line did not arrive before stdin was sent")
	}
	if _, err := p.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.exit.ExitCode != 0 {
		t.Fatalf("Wait = %+v, %v", r.exit, r.err)
	}
	if got := out.String(); got != "first\nsecond go\n" {
		t.Errorf("output = %q", got)
	}
}

func TestExecResizeAndSignal(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	tests := []struct {
		name    string
		argv    []string
		act     func(p *guestapi.Process) error
		want    string
		wantRC  int
		waitFor string
	}{
		{
			name:    "resize",
			argv:    []string{"sh", "-c", "echo ready; read x; stty size"},
			waitFor: "ready",
			act: func(p *guestapi.Process) error {
				if err := p.Resize(50, 120); err != nil {
					return err
				}
				_, err := p.Write([]byte("\n"))
				return err
			},
			want: "50 120",
		},
		{
			name:    "signal",
			argv:    []string{"sh", "-c", "echo ready; exec sleep 30"},
			waitFor: "ready",
			act:     func(p *guestapi.Process) error { return p.Signal("INT") },
			wantRC:  130,
		},
		{
			name:    "stdin close sends EOF",
			argv:    []string{"sh", "-c", "echo ready; cat; echo done"},
			waitFor: "ready",
			act:     func(p *guestapi.Process) error { return p.CloseStdin() },
			want:    "done",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := testCtx(t)
			p, err := c.Start(ctx, guestapi.ExecStart{Argv: tt.argv, TTY: true, Stdin: true, Rows: 24, Cols: 80})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			out := newNotifyWriter(tt.waitFor)
			done := make(chan guestapi.Control, 1)
			errc := make(chan error, 1)
			go func() {
				exit, err := p.Wait(out, nil)
				done <- exit
				errc <- err
			}()
			select {
			case <-out.seen:
			case <-ctx.Done():
				t.Fatal("no output")
			}
			if err := tt.act(p); err != nil {
				t.Fatal(err)
			}
			exit := <-done
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if exit.ExitCode != tt.wantRC || !strings.Contains(out.String(), tt.want) {
				t.Errorf("exit %+v, output %q; want code %d and %q", exit, out.String(), tt.wantRC, tt.want)
			}
		})
	}
}

func TestExecDisconnectKillsCommand(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	ctx, cancel := context.WithCancel(testCtx(t))
	p, err := c.Start(ctx, guestapi.ExecStart{Argv: []string{"sleep", "60"}})
	if err != nil {
		t.Fatal(err)
	}
	pid := p.PID()
	if pid <= 0 {
		t.Fatalf("pid = %d", pid)
	}
	cancel()
	_ = p.Close()
	waitGone(t, pid)
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still exists", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecBackgroundChildDoesNotHoldExit(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	var out bytes.Buffer
	began := time.Now()
	exit, err := c.Exec(testCtx(t), guestapi.ExecStart{Argv: []string{"sh", "-c", "sleep 20 & echo $!"}}, nil, &out, nil)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", exit, err)
	}
	var bg int
	if _, err := fmt.Sscan(out.String(), &bg); err != nil {
		t.Fatalf("output %q: %v", out.String(), err)
	}
	defer func() { _ = syscall.Kill(bg, syscall.SIGKILL) }()
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("exec waited %v for a background child", d)
	}
	if syscall.Kill(bg, 0) != nil {
		t.Errorf("background child %d did not survive the command's normal exit", bg)
	}
}

func TestExecLargeOutputBeforeExit(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	var out bytes.Buffer
	exit, err := c.Exec(testCtx(t), guestapi.ExecStart{Argv: []string{"head", "-c", "5000000", "/dev/zero"}}, nil, &out, nil)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("Exec = %+v, %v", exit, err)
	}
	if out.Len() != 5000000 {
		t.Errorf("got %d bytes, want 5000000", out.Len())
	}
}

func TestFiles(t *testing.T) {
	t.Parallel()
	c, work := startGuest(t)
	ctx := testCtx(t)
	p := filepath.Join(work, "a", "b", "hello.txt")
	if err := c.Upload(ctx, p, 0o600, strings.NewReader("hello world")); err != nil {
		t.Fatal(err)
	}
	rc, err := c.Download(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(got) != "hello world" {
		t.Fatalf("download = %q, %v", got, err)
	}
	fi, err := c.Stat(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 11 || fi.Mode != "-rw-------" || fi.IsDir || fi.Name != "hello.txt" || fi.Path != p {
		t.Errorf("stat = %+v", fi)
	}
	if err := c.Upload(ctx, p, 0o644, strings.NewReader("replaced")); err != nil {
		t.Fatal(err)
	}
	list, err := c.List(ctx, filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "hello.txt" || list[0].Size != 8 || list[0].Mode != "-rw-r--r--" {
		t.Errorf("list = %+v (temporary files must not remain)", list)
	}

	errTests := []struct {
		name string
		call func() error
		want error
	}{
		{"download missing", func() error { _, err := c.Download(ctx, filepath.Join(work, "nope")); return err }, guestapi.ErrNotFound},
		{"stat missing", func() error { _, err := c.Stat(ctx, filepath.Join(work, "nope")); return err }, guestapi.ErrNotFound},
		{"list missing", func() error { _, err := c.List(ctx, filepath.Join(work, "nope")); return err }, guestapi.ErrNotFound},
		{"relative download", func() error { _, err := c.Download(ctx, "rel/x"); return err }, guestapi.ErrBadRequest},
		{"relative upload", func() error { return c.Upload(ctx, "rel/x", 0o644, strings.NewReader("")) }, guestapi.ErrBadRequest},
		{"empty path", func() error { _, err := c.Stat(ctx, ""); return err }, guestapi.ErrBadRequest},
		{"download dir", func() error { _, err := c.Download(ctx, work); return err }, guestapi.ErrBadRequest},
		{"upload over dir", func() error { return c.Upload(ctx, work, 0o644, strings.NewReader("")) }, guestapi.ErrBadRequest},
		{"list a file", func() error { _, err := c.List(ctx, p); return err }, guestapi.ErrBadRequest},
		{"bad mode", func() error { return c.Upload(ctx, p, 0o17777, strings.NewReader("")) }, guestapi.ErrBadRequest},
	}
	for _, tt := range errTests {
		err := tt.call()
		var ge *guestapi.Error
		if !errors.Is(err, tt.want) || !errors.As(err, &ge) || ge.Message == "" {
			t.Errorf("%s: err = %v, want %v with a message", tt.name, err, tt.want)
		}
	}
}

func TestReady(t *testing.T) {
	t.Parallel()
	c, _ := startGuest(t)
	r, err := c.Ready(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if r.Version != guestapi.Version || r.PID != os.Getpid() || r.Kernel == "" || r.Hostname == "" || r.Uptime <= 0 {
		t.Errorf("ready = %+v", r)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	c, _ := startGuest(b)
	ctx := context.Background()
	for b.Loop() {
		exit, err := c.Exec(ctx, guestapi.ExecStart{Argv: []string{"true"}}, nil, nil, nil)
		if err != nil || exit.ExitCode != 0 {
			b.Fatalf("exec = %+v, %v", exit, err)
		}
	}
}
