package guest

import (
	"fmt"
	"os"
	"syscall"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestapi"
)

// startTTY starts the command on a new PTY, in its own session.
func (x *execRun) startTTY(st guestapi.ExecStart) error {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return fmt.Errorf("open pty: %w", err)
	}
	defer tty.Close()
	// pty.Open leaves the master in blocking mode; a non-blocking duplicate
	// goes through the runtime poller, so reads honour deadlines and Close.
	fd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	_ = ptmx.Close()
	if err != nil {
		return fmt.Errorf("dup pty: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("pty nonblock: %w", err)
	}
	master := os.NewFile(uintptr(fd), "ptmx")
	rows, cols := st.Rows, st.Cols
	if rows == 0 || cols == 0 {
		rows, cols = 24, 80
	}
	if err := setWinsize(master, rows, cols); err != nil {
		_ = master.Close()
		return fmt.Errorf("set pty size: %w", err)
	}
	x.cmd.Stdin, x.cmd.Stdout, x.cmd.Stderr = tty, tty, tty
	x.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := x.cmd.Start(); err != nil {
		_ = master.Close()
		return fmt.Errorf("start %s: %w", st.Argv[0], err)
	}
	x.tty = master
	x.stdin = master
	x.outs = []*os.File{master}
	return nil
}

func setWinsize(f *os.File, rows, cols uint16) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return err
	}
	return ierr
}
