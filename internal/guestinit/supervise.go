package guestinit

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// Supervisor runs the guest daemon as PID 1's child, restarts it when it
// exits and reaps every other zombie re-parented to PID 1.
type Supervisor struct {
	argv []string
	log  *slog.Logger

	mu      sync.Mutex
	env     map[string]string
	pid     int
	started time.Time
	backoff time.Duration
	running bool          // Run has started
	now     bool          // a Restart waits: start again without backoff
	changed chan struct{} // closed (and replaced) at every start
	poke    chan struct{} // tells Run a Restart waits
	lastID  uint64        // request id of the last Restart, and the pid it started
	lastPID int
}

// NewSupervisor returns a supervisor for argv (argv[0] is an absolute path).
func NewSupervisor(argv []string, log *slog.Logger) *Supervisor {
	return &Supervisor{argv: argv, log: log, backoff: 500 * time.Millisecond,
		changed: make(chan struct{}), poke: make(chan struct{}, 1)}
}

// SetEnv replaces the daemon's extra environment; it applies on next start.
func (s *Supervisor) SetEnv(env map[string]string) {
	s.mu.Lock()
	s.env = env
	s.mu.Unlock()
}

// Restart bounds: SIGKILL a daemon that has not exited this long after
// SIGTERM; give up waiting for the new one after restartWait.
const (
	restartKillAfter = 5 * time.Second
	restartWait      = 20 * time.Second
)

// Restart stops the daemon (SIGTERM, SIGKILL after restartKillAfter) and
// returns once Run has started a new one, at once rather than after the
// crash backoff, with the environment SetEnv gave. It returns the new
// daemon's pid: once Restart returns, the old daemon is gone and has
// released its channels. id names the request: a request with the id of
// the last one (a host resending a message it heard no answer to) does not
// restart again and returns the same pid. Before Run starts there is no
// daemon to restart: it returns 0, and the first start sees the env.
func (s *Supervisor) Restart(id uint64) (int, error) {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return 0, nil
	}
	if id != 0 && id == s.lastID && s.lastPID > 0 {
		pid := s.lastPID
		s.mu.Unlock()
		return pid, nil
	}
	old := s.pid
	s.now = true
	s.mu.Unlock()
	if old > 0 {
		_ = unix.Kill(old, unix.SIGTERM)
	}
	select { // Run starts a daemon that is down (crashed, in backoff) at once
	case s.poke <- struct{}{}:
	default:
	}
	pid, err := s.awaitNew(old)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.lastID, s.lastPID = id, pid
	s.now = false // consumed already, unless a backoff start beat the request
	s.mu.Unlock()
	return pid, nil
}

// awaitNew waits until a daemon other than old runs, killing old if it
// lingers.
func (s *Supervisor) awaitNew(old int) (int, error) {
	kill := time.NewTimer(restartKillAfter)
	defer kill.Stop()
	limit := time.NewTimer(restartWait)
	defer limit.Stop()
	for {
		s.mu.Lock()
		pid, changed := s.pid, s.changed
		s.mu.Unlock()
		if pid > 0 && pid != old {
			return pid, nil
		}
		select {
		case <-changed:
		case <-kill.C:
			if old > 0 {
				s.log.Warn("guest daemon ignored SIGTERM; killing it", "pid", old)
				_ = unix.Kill(old, unix.SIGKILL)
			}
		case <-limit.C:
			return 0, fmt.Errorf("restart guest daemon: no new daemon after %s", restartWait)
		}
	}
}

func (s *Supervisor) environ() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := map[string]string{
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME": "/root", "TERM": "xterm-256color", "LANG": "C.UTF-8",
	}
	for k, v := range s.env {
		base[k] = v
	}
	out := make([]string, 0, len(base))
	for k, v := range base {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (s *Supervisor) start() error {
	logf, err := os.OpenFile(initproto.DaemonLog+".out", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("start guest daemon: open log: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open("/dev/null")
	if err != nil {
		return fmt.Errorf("start guest daemon: %w", err)
	}
	defer devnull.Close()
	p, err := os.StartProcess(s.argv[0], s.argv, &os.ProcAttr{
		Dir:   "/",
		Env:   s.environ(),
		Files: []*os.File{devnull, logf, logf},
		Sys:   &syscall.SysProcAttr{Setsid: true},
	})
	if err != nil {
		return fmt.Errorf("start guest daemon: %w", err)
	}
	s.mu.Lock()
	s.pid, s.started = p.Pid, time.Now()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	pid := p.Pid
	_ = p.Release() // the reaper collects it, not os.Process
	s.log.Info("guest daemon started", "pid", pid)
	return nil
}

// Run starts the daemon and reaps children forever (PID 1 never returns).
func (s *Supervisor) Run() {
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, unix.SIGCHLD)
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	restart := time.NewTimer(0)
	for {
		select {
		case <-sig:
			if s.reap() {
				restart.Reset(s.nextBackoff())
			}
		case <-s.poke:
			if s.takeNow() { // down, waiting out a backoff: start at once
				restart.Reset(0)
			}
		case <-restart.C:
			if err := s.start(); err != nil {
				s.log.Error("guest daemon", "err", err)
				restart.Reset(s.nextBackoff())
			}
		}
	}
}

// reap collects every exited child; it reports whether the daemon was one.
func (s *Supervisor) reap() bool {
	daemonExited := false
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return daemonExited
		}
		s.mu.Lock()
		if pid == s.pid {
			s.pid = 0
			daemonExited = true
			s.log.Warn("guest daemon exited", "pid", pid, "status", ws.ExitStatus(), "signal", ws.Signal().String())
		}
		s.mu.Unlock()
	}
}

// takeNow consumes a waiting Restart's request if no daemon runs (one
// that runs is being stopped: its reap consumes the request).
func (s *Supervisor) takeNow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid != 0 || !s.now {
		return false
	}
	s.now = false
	return true
}

// nextBackoff is how long to wait before the next start: none when a
// Restart waits, else growing while the daemon keeps exiting.
func (s *Supervisor) nextBackoff() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.now {
		s.now = false
		return 0
	}
	if time.Since(s.started) > 30*time.Second {
		s.backoff = 500 * time.Millisecond
	}
	d := s.backoff
	s.backoff = min(2*s.backoff, 10*time.Second)
	return d
}
