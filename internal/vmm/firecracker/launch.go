package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// LaunchSpec is one Firecracker (or jailer) process to start.
type LaunchSpec struct {
	Path      string   // binary: firecracker or jailer
	Args      []string // arguments after the binary
	Dir       string   // working directory (the workdir without the jailer)
	Setsid    bool     // start in a new session (the jailer does it itself with --daemonize)
	Output    string   // file for the process's stdout and stderr; empty: /dev/null
	APISocket string   // host path of the API socket the process will serve
	Workdir   string   // host directory Firecracker's relative or chroot paths resolve in
	Jailed    bool     // paths Firecracker sees are absolute inside Workdir (the chroot)
}

// Process is a started Firecracker process.
type Process interface {
	PID() int
	// Exited is closed when the process has exited and been reaped.
	Exited() <-chan struct{}
}

// Launcher starts Firecracker processes. The exec implementation is the
// default; tests inject one that serves a fake API.
type Launcher interface {
	Launch(ctx context.Context, spec LaunchSpec) (Process, error)
}

// ExecLauncher starts the real binary.
type ExecLauncher struct{}

type execProcess struct {
	pid    int
	exited chan struct{}
}

func (p *execProcess) PID() int                { return p.pid }
func (p *execProcess) Exited() <-chan struct{} { return p.exited }

// Launch starts spec.Path and reaps it when it exits.
func (ExecLauncher) Launch(_ context.Context, spec LaunchSpec) (Process, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Dir = spec.Dir
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: spec.Setsid} // survives a host-agent kill
	if spec.Output != "" {
		f, err := os.OpenFile(spec.Output, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
		if err != nil {
			return nil, fmt.Errorf("launch %s: %w", spec.Path, err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("launch %s: %w", spec.Path, err)
	}
	p := &execProcess{pid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// jailerArgs renders the jailer command line. Everything after "--" goes
// to Firecracker (the jailer adds --id itself); extra are jailer flags
// (--cgroup) placed before it.
func jailerArgs(cfg Config, id string, extra, fcArgs []string) []string {
	a := []string{
		"--id", id,
		"--exec-file", cfg.FirecrackerBinary,
		"--uid", strconv.Itoa(cfg.UID),
		"--gid", strconv.Itoa(cfg.GID),
		"--chroot-base-dir", cfg.ChrootBase,
		"--cgroup-version", strconv.Itoa(cfg.CgroupVersion),
	}
	if cfg.NetNS != "" {
		a = append(a, "--netns", cfg.NetNS)
	}
	a = append(a, extra...)
	a = append(a, "--daemonize", "--")
	return append(a, fcArgs...)
}

// chrootDir is the jailer's <chroot_base>/<exec_file_name>/<id>; the jail
// root is its "root" subdirectory.
func chrootDir(cfg Config, id string) string {
	return filepath.Join(cfg.ChrootBase, filepath.Base(cfg.FirecrackerBinary), id)
}

// jailID makes a jailer --id (alphanumerics and hyphens, at most 64) that
// is unique per launch.
func jailID(sessionID string) string {
	var b strings.Builder
	for _, r := range sessionID {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		}
	}
	s := b.String()
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	if max := 64 - len(suffix) - 1; len(s) > max {
		s = s[:max]
	}
	if s == "" {
		s = "vm"
	}
	return s + "-" + suffix
}

// stage makes src visible as dst: a hard link (the jailer needs the file
// inside the chroot), else a symlink when not jailed, else a copy.
func stage(src, dst string, jailed bool) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return nil
	} else if !jailed {
		abs, aerr := filepath.Abs(src)
		if aerr != nil {
			return fmt.Errorf("stage %s: %w", src, errors.Join(err, aerr))
		}
		if serr := os.Symlink(abs, dst); serr == nil {
			return nil
		}
	}
	if err := vmimage.CloneFile(src, dst); err != nil {
		return fmt.Errorf("stage %s: %w", src, err)
	}
	return nil
}

// moveFile renames src to dst, copying when they are on different filesystems.
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	if err := vmimage.CloneFile(src, dst); err != nil {
		return err
	}
	return os.Remove(src)
}
