package snapshots

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guest"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// guestClient serves a real guest daemon on a Unix socket for the test.
func guestClient(t *testing.T) *guestapi.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "wu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "g.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := guest.New(guest.Config{WorkDir: dir, StateDir: filepath.Join(dir, "state"), Env: []string{"PATH=" + os.Getenv("PATH")}}, guest.Deps{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	c := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(c.Close)
	return c
}

// TestRunWarmupCancelledIsNotAWarmupFailure: a warm-up cut short by the
// host (its lease, a shutdown) is this host's trouble, which the
// coordinator retries elsewhere, not the image's.
func TestRunWarmupCancelledIsNotAWarmupFailure(t *testing.T) {
	t.Parallel()
	c := guestClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := runWarmup(ctx, c, hostlink.CaptureRequest{Warmup: "sleep 30", WarmupTimeout: time.Minute, WarmupStall: time.Minute})
	if err == nil || errors.Is(err, errWarmup) {
		t.Fatalf("err %v: a cancelled warm-up must not count as the warm-up failing", err)
	}
}

func TestRunWarmup(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		script   string
		timeout  time.Duration
		stall    time.Duration
		wantErr  string // "" means success
		wantTail string // suffix of the kept output
	}{
		{"succeeds", "echo one; echo two", 10 * time.Second, 5 * time.Second, "", "one\ntwo\n"},
		{"empty is nothing to do", "  ", time.Second, time.Second, "", ""},
		{"non-zero exit", "echo failing >&2; exit 3", 10 * time.Second, 5 * time.Second, "exited with status 3", "failing\n"},
		{"stalls", "echo started; sleep 30", 20 * time.Second, 600 * time.Millisecond, "printed nothing for 600ms", "started\n"},
		{"runs too long", "while true; do echo tick; sleep 0.1; done", time.Second, 5 * time.Second, "longer than 1s", "tick\n"},
		{"keeps only the tail", "i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); done; exit 1", 20 * time.Second, 5 * time.Second, "status 1", "line2999\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := guestClient(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			t0 := time.Now()
			tail, err := runWarmup(ctx, c, hostlink.CaptureRequest{Warmup: tc.script, WarmupTimeout: tc.timeout, WarmupStall: tc.stall})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("warm-up failed: %v (tail %q)", err, tail)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, errWarmup)):
				t.Fatalf("err %v, want a warm-up failure with %q", err, tc.wantErr)
			case tc.wantTail == "" && tail != "":
				t.Fatalf("tail %q, want none", tail)
			case !strings.HasSuffix(tail, tc.wantTail):
				t.Fatalf("tail %q does not end with %q", tail, tc.wantTail)
			case len(tail) > warmupTailMax:
				t.Fatalf("tail is %d bytes, kept at most %d", len(tail), warmupTailMax)
			case time.Since(t0) > tc.timeout+10*time.Second: // the stall or limit ended it, not the test's context
				t.Fatalf("warm-up took %s", time.Since(t0))
			}
		})
	}
}
