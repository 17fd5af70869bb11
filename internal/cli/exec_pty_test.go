//go:build linux

package cli_test

import (
	"bytes"
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

// TestExecTTY runs `session exec -it` on a real pseudo-terminal: the remote
// PTY gets the local size, SIGWINCH becomes a resize, raw mode is undone.
func TestExecTTY(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	if err := pty.Setsize(tty, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	var screen syncBuffer
	go func() { _, _ = copyAll(&screen, ptmx) }()

	srv := newServer(t)
	var errb bytes.Buffer
	root := cli.NewRoot(cli.Options{
		Stdin: tty, Stdout: tty, Stderr: &errb,
		Getenv: func(k string) string {
			return map[string]string{"ENGRAMS_URL": srv.URL, "ENGRAMS_TOKEN": clienttest.Token, "ENGRAMS_CONFIG": "/nonexistent"}[k]
		},
	})
	done := make(chan int, 1)
	root.SetArgs([]string{"session", "exec", "-it", "s1", "--", "tty"})
	go func() { done <- cli.Execute(t.Context(), root) }()

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
