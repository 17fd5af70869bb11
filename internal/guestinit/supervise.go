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
}

// NewSupervisor returns a supervisor for argv (argv[0] is an absolute path).
func NewSupervisor(argv []string, log *slog.Logger) *Supervisor {
	return &Supervisor{argv: argv, log: log, backoff: 500 * time.Millisecond}
}

// SetEnv replaces the daemon's extra environment; it applies on next start.
func (s *Supervisor) SetEnv(env map[string]string) {
	s.mu.Lock()
	s.env = env
	s.mu.Unlock()
}

// Restart signals the daemon to stop; the reaper starts it again.
func (s *Supervisor) Restart() {
	s.mu.Lock()
	pid := s.pid
	s.mu.Unlock()
	if pid > 0 {
		_ = unix.Kill(pid, unix.SIGTERM)
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
	logf, err := os.OpenFile(DaemonLog+".out", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
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
	restart := time.NewTimer(0)
	for {
		select {
		case <-sig:
			if s.reap() {
				restart.Reset(s.nextBackoff())
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

func (s *Supervisor) nextBackoff() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.started) > 30*time.Second {
		s.backoff = 500 * time.Millisecond
	}
	d := s.backoff
	s.backoff = min(2*s.backoff, 10*time.Second)
	return d
}
