package guestinit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mdlayher/vsock"
	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// Run is PID 1: it prepares the machine and then supervises the guest
// daemon forever. It returns only on a fatal error (the caller exits and
// the kernel panics, which stops the VM: the host sees it and the error is
// on the serial log).
func Run() error {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)) // the console, drained by the host
	if err := EarlyMounts(); err != nil {
		return err
	}
	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	p, err := initproto.ParseCmdline(string(cmdline))
	if err != nil {
		return err
	}
	if n, err := LoadModules(initproto.ModuleList); err != nil {
		return err
	} else {
		log.Debug("modules loaded", "count", n)
	}
	if p.Root != "" {
		if err := MountRoot(p, "/newroot"); err != nil {
			return err
		}
		if err := SwitchRoot("/newroot"); err != nil {
			return err
		}
	}
	harness := newHarness(p.Harness)
	if err := harness.Mount(); err != nil {
		return err
	}
	if err := LateMounts(); err != nil {
		return err
	}
	if lf, err := openLog(initproto.InitLog); err == nil {
		log = slog.New(slog.NewTextHandler(lf, nil))
	}
	if p.Hostname != "" {
		_ = unix.Sethostname([]byte(p.Hostname))
	}
	if err := SetupNetwork(p.Address, p.Gateway); err != nil {
		log.Warn("network", "err", err)
	}
	listen := "vport:" + p.Port
	if strings.HasPrefix(p.Port, "vsock:") { // Firecracker: the guest channel is vsock
		listen = p.Port
	}
	sup := NewSupervisor([]string{initproto.DaemonPath, "--listen", listen, "--log-file", initproto.DaemonLog}, log)
	sup.SetEnv(readEnv())
	first := make(chan struct{})
	if p.CtlPort != "" {
		go serveControl(p.CtlPort, controller{sup, harness}, log, first)
	}
	if p.WaitConfig && p.CtlPort != "" {
		select {
		case <-first:
		case <-time.After(10 * time.Second):
			log.Warn("no control message from the host in 10s; starting the daemon anyway")
		}
	}
	sup.Run()
	return errors.New("supervisor returned")
}

func openLog(path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	return os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
}

// serveControl answers Control lines on the control channel: a vsock port
// ("vsock:N", Firecracker) or a named virtio-serial port (QEMU).
func serveControl(name string, c controller, log *slog.Logger, first chan<- struct{}) {
	var once sync.Once
	signal := func() { once.Do(func() { close(first) }) }
	if port, ok := strings.CutPrefix(name, "vsock:"); ok {
		serveControlVsock(port, c, log, signal)
		return
	}
	var dev string
	for {
		d, err := FindPort(name)
		if err == nil {
			dev = d
			break
		}
		time.Sleep(retryDelay)
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		log.Error("control port", "err", err)
		return
	}
	for {
		// When the host end is not connected reads return EOF; wait and
		// read again (a partial line is dropped).
		if err := serveLines(f, c, signal); err != nil && err != io.EOF {
			log.Error("control port read", "err", err)
		}
		time.Sleep(retryDelay)
	}
}

// serveControlVsock accepts host connections on a vsock port, one at a time.
func serveControlVsock(port string, c controller, log *slog.Logger, signal func()) {
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		log.Error("control port", "err", fmt.Errorf("bad vsock port %q: %w", port, err))
		return
	}
	for {
		ln, err := vsock.Listen(uint32(n), nil)
		if err != nil {
			log.Error("control vsock listen", "err", err)
			time.Sleep(retryDelay)
			continue
		}
		for {
			conn, err := ln.Accept()
			if err != nil {
				log.Error("control vsock accept", "err", err)
				break
			}
			if err := serveLines(conn, c, signal); err != nil && err != io.EOF {
				log.Warn("control vsock", "err", err)
			}
			conn.Close()
		}
		ln.Close()
		time.Sleep(retryDelay)
	}
}

// controller carries out control messages.
type controller struct {
	sup     *Supervisor
	harness *Harness // nil: no harness disk
}

// serveLines answers each Control line on rw until a read fails.
func serveLines(rw io.ReadWriter, c controller, signal func()) error {
	r := bufio.NewReader(rw)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return err
		}
		b, _ := json.Marshal(c.handle(line))
		if _, err := rw.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("write reply: %w", err)
		}
		signal()
	}
}

// handle applies one control line: the settings, then a harness
// remount, then a daemon restart (skipped when the remount failed).
func (ct controller) handle(line []byte) initproto.Reply {
	var c initproto.Control
	if err := json.Unmarshal(line, &c); err != nil {
		return initproto.Reply{Error: "decode control: " + err.Error()}
	}
	rep := initproto.Reply{ID: c.ID, OK: true, BootID: bootID()}
	if err := applyControl(c, ct.sup.SetEnv); err != nil {
		rep.OK, rep.Error = false, err.Error()
	}
	if c.RemountHarness {
		if err := ct.harness.Remount(); err != nil {
			rep.OK, rep.Error = false, joinErr(rep.Error, err.Error())
			return rep
		}
		rep.HarnessRemounted = true
	}
	if c.RestartGuest {
		pid, err := ct.sup.Restart(c.ID)
		if err != nil {
			rep.OK, rep.Error = false, joinErr(rep.Error, err.Error())
		}
		rep.GuestPID = pid
	}
	return rep
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
