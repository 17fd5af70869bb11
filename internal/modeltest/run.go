package modeltest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Line is one JSON line a CLI printed on stdout.
type Line struct {
	// At is when the line arrived, counted from the process start.
	At time.Duration
	// Type is the line's "type" field.
	Type string
	// Raw is the line as printed.
	Raw json.RawMessage
}

// Field decodes the line's top-level field name into v; false when absent
// or of another shape.
func (l Line) Field(name string, v any) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(l.Raw, &m) != nil {
		return false
	}
	f, ok := m[name]
	return ok && json.Unmarshal(f, v) == nil
}

// Run is what a CLI run printed and how it ended.
type Run struct {
	// Lines is every stdout line that is a JSON object, in order.
	Lines []Line
	// Other is stdout lines that are not JSON objects.
	Other []string
	// Stderr is everything printed on stderr.
	Stderr string
	// ExitCode is the exit status (-1 when killed by a signal or not run).
	ExitCode int
	// Started is when the process was started.
	Started time.Time
	// Duration is process start to exit.
	Duration time.Duration
}

// First is the first line for which match is true, and whether there is one.
func (r *Run) First(match func(Line) bool) (Line, bool) {
	for _, l := range r.Lines {
		if match(l) {
			return l, true
		}
	}
	return Line{}, false
}

// Types is the sequence of line types, consecutive repeats collapsed
// ("stream_event ×12" style counts are left to the caller).
func (r *Run) Types() []string {
	var out []string
	for _, l := range r.Lines {
		if len(out) == 0 || out[len(out)-1] != l.Type {
			out = append(out, l.Type)
		}
	}
	return out
}

// Output is stdout's non-JSON lines and stderr, for error messages.
func (r *Run) Output() string {
	return strings.Join(r.Other, "\n") + "\n" + r.Stderr
}

// RunJSONL starts cmd, timestamps each stdout line as it arrives and waits
// for the process to exit. onLine, when set, sees each JSON line as it
// arrives (to feed stdin in turn, say). A non-zero exit is not an error (see
// Run.ExitCode); failing to start, or ctx ending first, is.
func RunJSONL(ctx context.Context, cmd *exec.Cmd, onLine func(Line)) (*Run, error) {
	if cmd.Stdout != nil || cmd.Stderr != nil {
		return nil, errors.New("run CLI: cmd.Stdout and cmd.Stderr must be unset")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("run CLI: stdout pipe: %w", err)
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second // a child left holding stdout
	}
	run := &Run{ExitCode: -1}
	start := time.Now()
	run.Started = start
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run CLI %s: start: %w", cmd.Path, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			at := time.Since(start)
			b := bytes.TrimSpace(sc.Bytes())
			var head struct {
				Type string `json:"type"`
			}
			if len(b) > 0 && b[0] == '{' && json.Unmarshal(b, &head) == nil {
				l := Line{At: at, Type: head.Type, Raw: append(json.RawMessage(nil), b...)}
				run.Lines = append(run.Lines, l)
				if onLine != nil {
					onLine(l)
				}
				continue
			}
			if len(b) > 0 {
				run.Other = append(run.Other, string(b))
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
	}
	werr := cmd.Wait()
	<-done
	run.Duration = time.Since(start)
	run.Stderr = stderr.String()
	if cmd.ProcessState != nil {
		run.ExitCode = cmd.ProcessState.ExitCode()
	}
	if ctx.Err() != nil {
		return run, fmt.Errorf("run CLI %s: %w", cmd.Path, ctx.Err())
	}
	var exitErr *exec.ExitError
	if werr != nil && !errors.As(werr, &exitErr) {
		return run, fmt.Errorf("run CLI %s: wait: %w", cmd.Path, werr)
	}
	return run, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
