package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
)

// execRun is one exec: a command and the wire that drives it (a WebSocket
// for interactive exec, or a plain HTTP request streaming NDJSON back).
type execRun struct {
	s      *Server
	wire   execWire
	ctx    context.Context
	cancel context.CancelFunc

	cmd            *exec.Cmd
	tty            *os.File // PTY master, or nil
	stdin          io.WriteCloser
	outs           []*os.File // read ends streamed to the client
	closeStdinOnce sync.Once
}

// execWire is how an exec talks to its client.
type execWire interface {
	// data sends output on channel ch (guestapi.ChanStdout/ChanStderr).
	data(ch byte, p []byte) error
	// control sends "started" or "exit".
	control(c guestapi.Control) error
	// serve feeds stdin and client controls to x until the client is gone
	// or x's context ends, and says why it stopped.
	serve(x *execRun, tty bool) error
	// close ends the exchange after the exit message.
	close()
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, http.StatusBadRequest, "exec needs a WebSocket upgrade")
		return
	}
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept answered the client
	}
	conn.SetReadLimit(maxFrame)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	ws := &wsWire{conn: conn, ctx: ctx}
	defer conn.CloseNow()
	x := &execRun{s: s, wire: ws, ctx: ctx, cancel: cancel}
	start, ok := ws.readStart(x)
	if !ok {
		return
	}
	x.run(start)
}

func (x *execRun) run(start guestapi.ExecStart) {
	if err := x.start(start); err != nil {
		x.finish(guestapi.Control{Type: "exit", ExitCode: -1, Error: err.Error()})
		return
	}
	pid := x.cmd.Process.Pid
	log := x.s.log.With("pid", pid, "argv0", start.Argv[0])
	log.Debug("exec started", "tty", start.TTY)
	if err := x.wire.control(guestapi.Control{Type: "started", PID: pid}); err != nil {
		x.killGroup()
	}

	clientGone := make(chan error, 1)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		clientGone <- x.wire.serve(x, start.TTY)
	}()
	var pumps sync.WaitGroup
	for i, f := range x.outs {
		ch := guestapi.ChanStdout
		if i == 1 {
			ch = guestapi.ChanStderr
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			x.pump(f, ch)
		}()
	}
	waitc := make(chan error, 1)
	go func() { waitc <- x.cmd.Wait() }()

	var timeout <-chan time.Time
	if start.TimeoutMS > 0 {
		t := time.NewTimer(time.Duration(start.TimeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	exit := guestapi.Control{Type: "exit"}
	var waitErr error
	select {
	case waitErr = <-waitc:
	case <-timeout:
		x.killGroup()
		waitErr = <-waitc
		exit.TimedOut = true
		exit.Error = fmt.Sprintf("timed out after %s", time.Duration(start.TimeoutMS)*time.Millisecond)
	case err := <-clientGone:
		log.Info("exec client gone, killing the command", "err", err)
		x.killGroup()
		waitErr = <-waitc
	}
	exit.ExitCode = exitCode(x.cmd.ProcessState, waitErr)

	// Drain what the command wrote; stop waiting soon for processes it left
	// behind that keep the stream open.
	deadline := time.Now().Add(x.s.cfg.OutputGrace)
	for _, f := range x.outs {
		_ = f.SetReadDeadline(deadline)
	}
	pumps.Wait()
	log.Debug("exec exited", "exit_code", exit.ExitCode, "timed_out", exit.TimedOut)
	x.finish(exit)
	<-readerDone
}

// finish sends the exit message, ends the exchange and releases the stdio.
func (x *execRun) finish(exit guestapi.Control) {
	_ = x.wire.control(exit)
	x.closeStdin()
	for _, f := range x.outs {
		_ = f.Close()
	}
	x.cancel() // stops the wire's serve loop
	x.wire.close()
}

// checkStart says what is wrong with an ExecStart, or "".
func checkStart(start guestapi.ExecStart) string {
	switch {
	case len(start.Argv) == 0 || start.Argv[0] == "":
		return "argv is empty"
	case start.Dir != "" && !strings.HasPrefix(start.Dir, "/"):
		return fmt.Sprintf("dir must be absolute: %q", start.Dir)
	case start.TimeoutMS < 0:
		return "timeout_ms must not be negative"
	}
	for k := range start.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Sprintf("invalid env name %q", k)
		}
	}
	return ""
}

// start starts the command with pipes or a PTY.
func (x *execRun) start(st guestapi.ExecStart) error {
	env := mergeEnv(x.s.cfg.Env, st.Env)
	if st.TTY && envValue(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	dir := st.Dir
	if dir == "" {
		dir = x.s.cfg.WorkDir
	}
	path, err := lookPath(st.Argv[0], envValue(env, "PATH"))
	if err != nil {
		return err
	}
	x.cmd = &exec.Cmd{Path: path, Args: st.Argv, Env: env, Dir: dir}
	if st.TTY {
		return x.startTTY(st)
	}
	return x.startPipes(st)
}

func (x *execRun) startPipes(st guestapi.ExecStart) error {
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			_ = f.Close()
		}
	}()
	if st.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("stdin pipe: %w", err)
		}
		childEnds = append(childEnds, r)
		x.cmd.Stdin, x.stdin = r, w
	}
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			x.releaseStdio()
			return fmt.Errorf("output pipe: %w", err)
		}
		childEnds = append(childEnds, w)
		x.outs = append(x.outs, r)
	}
	x.cmd.Stdout, x.cmd.Stderr = childEnds[len(childEnds)-2], childEnds[len(childEnds)-1]
	x.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := x.cmd.Start(); err != nil {
		x.releaseStdio()
		return fmt.Errorf("start %s: %w", st.Argv[0], err)
	}
	return nil
}

func (x *execRun) releaseStdio() {
	x.closeStdin()
	for _, f := range x.outs {
		_ = f.Close()
	}
	x.outs = nil
}

func (x *execRun) closeStdin() {
	x.closeStdinOnce.Do(func() {
		if x.stdin != nil && x.tty == nil {
			_ = x.stdin.Close()
		}
	})
}

// pump streams f to the client on ch until EOF, or until the read
// deadline set after the command exited, then drains what is buffered.
func (x *execRun) pump(f *os.File, ch byte) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if x.wire.data(ch, buf[:n]) != nil {
				return
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return // EOF, or EIO from a PTY whose terminal closed
		}
	}
	for { // drain: data already buffered is read without waiting
		_ = f.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		n, err := f.Read(buf)
		if n > 0 {
			if x.wire.data(ch, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (x *execRun) control(c guestapi.Control, tty bool) {
	switch c.Type {
	case "stdin_close":
		if tty && x.tty != nil {
			_, _ = x.tty.Write([]byte{4}) // ^D: end of input for the line discipline
			return
		}
		x.closeStdin()
	case "resize":
		if x.tty != nil && c.Rows > 0 && c.Cols > 0 {
			if err := setWinsize(x.tty, c.Rows, c.Cols); err != nil {
				x.s.log.Debug("resize failed", "err", err)
			}
		}
	case "signal":
		sig, err := parseSignal(c.Signal)
		if err != nil {
			x.s.log.Debug("bad signal", "signal", c.Signal, "err", err)
			return
		}
		_ = unix.Kill(-x.cmd.Process.Pid, sig)
	default:
		x.s.log.Debug("unknown control message", "type", c.Type)
	}
}

func (x *execRun) killGroup() {
	_ = unix.Kill(-x.cmd.Process.Pid, unix.SIGKILL)
	_ = x.cmd.Process.Kill()
}

func exitCode(ps *os.ProcessState, waitErr error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func parseSignal(s string) (unix.Signal, error) {
	s = strings.ToUpper(strings.TrimSpace(s))
	if s == "" {
		return 0, errors.New("empty signal")
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("signal number out of range: %d", n)
		}
		return unix.Signal(n), nil
	}
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	sig := unix.SignalNum(s)
	if sig == 0 {
		return 0, fmt.Errorf("unknown signal %q", s)
	}
	return sig, nil
}

// mergeEnv returns base with over's keys replaced or added (sorted keys).
func mergeEnv(base []string, over map[string]string) []string {
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, replaced := over[k]; !replaced {
			out = append(out, kv)
		}
	}
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+over[k])
	}
	return out
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// lookPath resolves file against the command's PATH (not the daemon's).
func lookPath(file, pathEnv string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	if pathEnv == "" {
		pathEnv = defaultPath
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + file
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("executable %q not found in PATH", file)
}
