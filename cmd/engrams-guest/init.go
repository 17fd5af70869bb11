package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runInit is PID 1 mode: the daemon runs as a child (same arguments) while
// this process forwards termination signals and reaps every orphan. It
// never returns while the machine runs: PID 1 must not exit.
func runInit(log *slog.Logger) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	var child int
	stopping := false
	start := func() {
		p, err := os.StartProcess(exe, os.Args, &os.ProcAttr{
			Env:   os.Environ(),
			Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		})
		if err != nil {
			log.Error("start guest daemon", "err", err)
			child = 0
			return
		}
		child = p.Pid
		_ = p.Release() // reaped below with wait4(-1)
		log.Info("init started guest daemon", "pid", child)
	}
	start()
	restart := time.NewTimer(time.Hour)
	restart.Stop()
	for {
		select {
		case <-restart.C:
			start()
			continue
		case sig := <-sigs:
			if sig != unix.SIGCHLD {
				stopping = sig == unix.SIGTERM || sig == unix.SIGINT
				if child > 0 {
					_ = unix.Kill(child, sig.(syscall.Signal))
				}
				continue
			}
		}
		for { // reap everything that exited
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			if pid == child {
				child = 0
				if stopping {
					log.Info("guest daemon stopped", "pid", pid)
					continue
				}
				log.Warn("guest daemon exited, restarting", "pid", pid, "status", ws.ExitStatus())
				restart.Reset(500 * time.Millisecond)
			}
		}
	}
}
