package snapshots

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// warmupTailMax bounds the warm-up output kept for the answer.
const warmupTailMax = 4 << 10

// errWarmup marks a failure of the warm-up itself (its exit status, a
// stall, its time limit), as opposed to this host's trouble running it.
var errWarmup = errors.New("warm-up failed")

// runWarmup runs req.Warmup with /bin/sh -c in req.Workdir, failing it when
// it exits non-zero, exceeds req.WarmupTimeout, or prints nothing for
// req.WarmupStall. It returns the tail of its output either way.
func runWarmup(ctx context.Context, gc *guestapi.Client, req hostlink.CaptureRequest) (string, error) {
	if strings.TrimSpace(req.Warmup) == "" {
		return "", nil
	}
	out := &tailWriter{max: warmupTailMax, last: time.Now()}
	ctx, cancel := context.WithCancelCause(ctx)
	var watcher sync.WaitGroup
	defer watcher.Wait()
	defer cancel(nil)
	stall := req.WarmupStall
	if stall <= 0 {
		stall = req.WarmupTimeout
	}
	watcher.Go(func() { out.watch(ctx, stall, cancel) })
	start := guestapi.ExecStart{Argv: []string{"/bin/sh", "-c", req.Warmup}, Dir: req.Workdir, TimeoutMS: req.WarmupTimeout.Milliseconds()}
	exit, err := gc.Exec(ctx, start, nil, out, out)
	var stalled *stallError
	switch {
	case errors.As(context.Cause(ctx), &stalled):
		return out.String(), fmt.Errorf("%w: %q printed nothing for %s (stalled)", errWarmup, req.Warmup, stalled.d)
	case err != nil:
		return out.String(), fmt.Errorf("run warm-up %q: %w", req.Warmup, err)
	case exit.TimedOut:
		return out.String(), fmt.Errorf("%w: %q ran longer than %s", errWarmup, req.Warmup, req.WarmupTimeout)
	case exit.Error != "":
		return out.String(), fmt.Errorf("%w: %q could not run: %s", errWarmup, req.Warmup, exit.Error)
	case exit.ExitCode != 0:
		return out.String(), fmt.Errorf("%w: %q exited with status %d", errWarmup, req.Warmup, exit.ExitCode)
	}
	return out.String(), nil
}

// tailWriter keeps the last max bytes written and when output last came.
type tailWriter struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	last time.Time
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.last = time.Now()
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// stallError is the cause a stalled warm-up is cancelled with.
type stallError struct{ d time.Duration }

func (e *stallError) Error() string { return fmt.Sprintf("no output for %s", e.d) }

// watch cancels with a stall error once no output came for stall.
func (t *tailWriter) watch(ctx context.Context, stall time.Duration, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(max(min(stall/4, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			t.mu.Lock()
			quiet := time.Since(t.last)
			t.mu.Unlock()
			if quiet >= stall {
				cancel(&stallError{d: stall.Round(time.Millisecond)})
				return
			}
		}
	}
}
