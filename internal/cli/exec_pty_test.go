//go:build linux

package cli_test

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
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

// onPTY is the CLI on a real pseudo-terminal: what the terminal shows,
// the CLI's stderr and its exit code once it ends.
type onPTY struct {
	tty    *os.File // the terminal the CLI reads and writes
	screen syncBuffer
	errb   syncBuffer
	done   chan int
}

// newPTY opens a pseudo-terminal of rows×cols and records what it shows.
func newPTY(t *testing.T, rows, cols uint16) *onPTY {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(tty, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	p := &onPTY{tty: tty, done: make(chan int, 1)}
	go func() { _, _ = copyAll(&p.screen, ptmx) }()
	return p
}

// run starts the CLI with args against srv on the terminal.
func (p *onPTY) run(t *testing.T, srv *clienttest.Server, args ...string) {
	root := cli.NewRoot(cli.Options{
		Stdin: p.tty, Stdout: p.tty, Stderr: &p.errb,
		Getenv: func(k string) string {
			return map[string]string{"ENGRAMS_URL": srv.URL, "ENGRAMS_TOKEN": clienttest.Token, "ENGRAMS_CONFIG": "/nonexistent"}[k]
		},
	})
	root.SetArgs(args)
	go func() { p.done <- cli.Execute(t.Context(), root) }()
}

// TestExecTTYMergesOutput: under -t the remote PTY carries stderr too, so
// it reaches the local terminal with stdout.
func TestExecTTYMergesOutput(t *testing.T) {
	t.Parallel()
	p := newPTY(t, 24, 80)
	p.run(t, newServer(t), "session", "exec", "-t", "s1", "--", "err", "oops")
	if code := <-p.done; code != 0 || p.errb.String() != "" {
		t.Fatalf("exit code %d, stderr %q", code, p.errb.String())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for !strings.Contains(p.screen.String(), "oops") {
		select {
		case <-ctx.Done():
			t.Fatalf("screen %q lacks the command's stderr", p.screen.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// TestExecTTY runs `session exec -it` on a real pseudo-terminal: the remote
// PTY gets the local size, SIGWINCH becomes a resize, raw mode is undone.
func TestExecTTY(t *testing.T) {
	t.Parallel()
	p := newPTY(t, 30, 100)
	tty, screen, errb, done := p.tty, &p.screen, &p.errb, p.done
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	p.run(t, newServer(t), "session", "exec", "-it", "s1", "--", "tty")

	deadline := time.After(10 * time.Second)
	resized := false
	for !strings.Contains(screen.String(), "resize 40 120") {
		select {
		case <-deadline:
			t.Fatalf("screen so far: %q; stderr %q", screen.String(), errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if strings.Contains(screen.String(), "tty=true rows=30 cols=100") {
			if !resized {
				if err := pty.Setsize(tty, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
					t.Fatal(err)
				}
				resized = true
			}
			_ = syscall.Kill(syscall.Getpid(), syscall.SIGWINCH) // ignored by default; repeated until seen
		}
	}
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d, stderr %q", code, errb.String())
	}
	after, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag {
		t.Errorf("terminal mode not restored: lflag %#x -> %#x", before.Lflag, after.Lflag)
	}
}

func copyAll(w *syncBuffer, r interface{ Read([]byte) (int, error) }) (int, error) {
	buf := make([]byte, 4096)
	n := 0
	for {
		m, err := r.Read(buf)
		n += m
		_, _ = w.Write(buf[:m])
		if err != nil {
			return n, err
		}
	}
}
