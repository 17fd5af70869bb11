package adapter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxHarnessLine bounds one line of harness output; a longer one is
// dropped (logged), never held whole.
const maxHarnessLine = 32 << 20

// procConfig is what every harness process shares.
type procConfig struct {
	stderrPath string        // harness stderr is appended here, never to the console
	pidPath    string        // the running harness process ("PID STARTTIME"), for killLeftover
	grace      time.Duration // SIGINT to SIGKILL
	stall      time.Duration // a turn with no output for this long is killed
	log        *slog.Logger
}

// procSpec is one harness process to start.
type procSpec struct {
	argv  []string
	dir   string
	env   []string
	stdin []byte // written then closed; nil keeps a pipe open (long-lived)
}

// hproc is a running harness process in its own process group.
type hproc struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser // nil unless long-lived
	stdout  *os.File       // read end
	lines   chan []byte    // stdout lines; closed at EOF
	readEnd chan struct{}  // closed when the reader returned
	done    chan struct{}  // closed when the process was reaped
	waitErr error
	log     *slog.Logger
}

// startProc starts spec with stdout on a pipe read line by line and stderr
// appended to the harness log.
func (c procConfig) startProc(spec procSpec) (*hproc, error) {
	stderr, err := openStderrLog(c.stderrPath)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()
	rd, wr, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start harness: stdout pipe: %w", err)
	}
	cmd := exec.Command(spec.argv[0], spec.argv[1:]...)
	cmd.Dir, cmd.Env = spec.dir, spec.env
	cmd.Stdout, cmd.Stderr = wr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &hproc{cmd: cmd, stdout: rd, lines: make(chan []byte, 16), readEnd: make(chan struct{}), done: make(chan struct{}), log: c.log}
	var stdin io.WriteCloser
	if spec.stdin == nil {
		if stdin, err = cmd.StdinPipe(); err != nil {
			_, _ = rd.Close(), wr.Close()
			return nil, fmt.Errorf("start harness: stdin pipe: %w", err)
		}
		p.stdin = stdin
	} else {
		cmd.Stdin = strings.NewReader(string(spec.stdin))
	}
	if err := cmd.Start(); err != nil {
		_, _ = rd.Close(), wr.Close()
		return nil, fmt.Errorf("start harness %s: %w", spec.argv[0], err)
	}
	_ = wr.Close()
	c.log.Info("harness process started", "argv", spec.argv, "dir", spec.dir, "pid", cmd.Process.Pid)
	if c.pidPath != "" {
		if st := procStart(cmd.Process.Pid); st != "" {
			_ = os.WriteFile(c.pidPath, []byte(fmt.Sprintf("%d %s\n", cmd.Process.Pid, st)), 0o600)
		}
	}
	go p.read()
	go func() {
		p.waitErr = cmd.Wait()
		if c.pidPath != "" {
			_ = os.Remove(c.pidPath)
		}
		close(p.done)
	}()
	return p, nil
}

// procStart is a process's start time (/proc/PID/stat field 22), which
// tells it apart from a later process given the same PID; "" if unknown.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// killLeftover kills the process group of a harness a previous daemon
// process left running (it died without stopping it), so that it cannot
// keep working beside the next turn.
func killLeftover(pidPath string, log *slog.Logger) {
	b, err := os.ReadFile(pidPath)
	if err != nil {
		return
	}
	var pid int
	var start string
	if _, err := fmt.Sscanf(string(b), "%d %s", &pid, &start); err == nil && pid > 1 && procStart(pid) == start {
		log.Warn("killing a harness process left by a previous daemon", "pid", pid)
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	_ = os.Remove(pidPath)
}

func openStderrLog(p string) (*os.File, error) {
	if st, err := os.Stat(p); err == nil && st.Size() > 16<<20 {
		_ = os.Truncate(p, 0) // keep the log bounded
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open harness stderr log: %w", err)
	}
	return f, nil
}

// read sends stdout's lines (without the newline) until EOF.
func (p *hproc) read() {
	defer close(p.readEnd)
	defer close(p.lines)
	r := bufio.NewReaderSize(p.stdout, 64<<10)
	var line []byte
	dropping := false
	for {
		chunk, err := r.ReadSlice('\n')
		switch {
		case dropping:
		case len(line)+len(chunk) > maxHarnessLine:
			p.log.Warn("harness output line too long; dropped", "limit_bytes", maxHarnessLine)
			dropping, line = true, nil
		default:
			line = append(line, chunk...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !dropping && len(line) > 0 {
			if out := strings.TrimRight(string(line), "\r\n"); out != "" {
				p.lines <- []byte(out)
			}
		}
		line, dropping = nil, false
		if err != nil {
			return
		}
	}
}

// signal sends sig to the process group.
func (p *hproc) signal(sig unix.Signal) {
	if p.cmd.Process != nil {
		_ = unix.Kill(-p.cmd.Process.Pid, sig)
	}
}

// exited reports whether the process was reaped.
func (p *hproc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process group (SIGINT, then SIGKILL after grace; grace 0
// kills at once) and joins the reader. Safe to call more than once.
func (p *hproc) stop(grace time.Duration) {
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	if !p.exited() {
		if grace > 0 {
			p.signal(unix.SIGINT)
			t := time.NewTimer(grace)
			select {
			case <-p.done:
			case <-t.C:
			}
			t.Stop()
		}
		p.signal(unix.SIGKILL)
		<-p.done
	}
	p.signal(unix.SIGKILL) // whatever is left in the group
	p.closeOutput(time.Second)
}

// closeOutput waits up to d for the reader to see EOF (a process left
// holding stdout outside the group may keep it open), then closes the pipe,
// draining unread lines so the reader can return.
func (p *hproc) closeOutput(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-p.readEnd:
			_ = p.stdout.Close()
			return
		case <-p.lines:
		case <-t.C:
			_ = p.stdout.Close()
			for range p.lines {
			}
			<-p.readEnd
			return
		}
	}
}

// exitText describes how the process ended, with the end of its stderr log.
func (p *hproc) exitText(stderrPath string) string {
	msg := "exited"
	if p.waitErr != nil {
		msg = p.waitErr.Error()
	}
	if t := logTail(stderrPath, 1024); t != "" {
		msg += ": " + t
	}
	return msg
}

// logTail is the last n bytes of a file, trimmed ("" when unreadable).
func logTail(p string, n int64) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-n, 0)
	b := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(b, off); err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// pumpEnd is why pump returned.
type pumpEnd int

const (
	pumpDone      pumpEnd = iota // handle said the turn is over
	pumpExited                   // the process ended (its output was read)
	pumpCancelled                // ctx is done
	pumpStalled                  // no output for the stall time
)

// pump hands p's lines to handle until it returns true, the process ends,
// ctx is done or no line came for the stall time.
func (c procConfig) pump(ctx context.Context, p *hproc, handle func([]byte) bool) pumpEnd {
	stall := time.NewTimer(c.stall)
	defer stall.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done // EOF: the process is ending
				return pumpExited
			}
			if handle(line) {
				return pumpDone
			}
			stall.Reset(c.stall)
		case <-p.done:
			if c.drain(p, handle) {
				return pumpDone
			}
			return pumpExited
		case <-ctx.Done():
			return pumpCancelled
		case <-stall.C:
			return pumpStalled
		}
	}
}

// drain handles the lines still buffered after the process exited.
func (c procConfig) drain(p *hproc, handle func([]byte) bool) bool {
	t := time.NewTimer(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return false
			}
			if handle(line) {
				return true
			}
		case <-t.C:
			return false
		}
	}
}
