package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// fakeGuest plays Firecracker's host-side vsock socket plus the guest:
// it answers "CONNECT <port>\n" with "OK <hostport>\n" for the daemon and
// control ports and closes the connection for any other port, then serves
// a minimal guest API (GET /v1/ready) or init's control protocol.
type fakeGuest struct {
	ln       net.Listener
	port     uint32
	ctl      uint32
	conns    chan net.Conn
	quit     chan struct{}
	once     sync.Once
	srv      *http.Server
	mu       sync.Mutex
	controls []initproto.Control
	pid      int // the guest daemon's: RestartGuest starts a "new" one
	wg       sync.WaitGroup
}

func startFakeGuest(uds string, port, ctl uint32) (*fakeGuest, error) {
	_ = os.Remove(uds)
	ln, err := net.Listen("unix", uds)
	if err != nil {
		return nil, err
	}
	g := &fakeGuest{ln: ln, port: port, ctl: ctl, conns: make(chan net.Conn), quit: make(chan struct{}), pid: 100}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
		g.mu.Lock()
		pid := g.pid
		g.mu.Unlock()
		_ = json.NewEncoder(w).Encode(guestapi.Ready{Version: guestapi.Version, BootID: "fake-boot", PID: pid, Kernel: "fake", Hostname: "fake"})
	})
	g.srv = &http.Server{Handler: mux}
	g.wg.Add(2)
	go func() { defer g.wg.Done(); _ = g.srv.Serve(chanListener{g}) }()
	go func() { defer g.wg.Done(); g.accept() }()
	return g, nil
}

func (g *fakeGuest) accept() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.handle(c)
	}
}

func (g *fakeGuest) handle(c net.Conn) {
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	port, perr := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "CONNECT "), 10, 32)
	if err != nil || perr != nil || !strings.HasPrefix(line, "CONNECT ") || (uint32(port) != g.port && uint32(port) != g.ctl) {
		c.Close() // Firecracker: nobody listens on that guest port
		return
	}
	if _, err := c.Write([]byte("OK 1073741824\n")); err != nil {
		c.Close()
		return
	}
	if uint32(port) == g.ctl {
		g.control(c, r)
		return
	}
	select {
	case g.conns <- c:
	case <-g.quit:
		c.Close()
	}
}

// control answers init's control protocol: one JSON line in, a Reply out.
func (g *fakeGuest) control(c net.Conn, r *bufio.Reader) {
	defer c.Close()
	line, err := r.ReadBytes('\n')
	if err != nil {
		return
	}
	var ctl initproto.Control
	rep := initproto.Reply{OK: true, BootID: "fake-boot"}
	if err := json.Unmarshal(line, &ctl); err != nil {
		rep = initproto.Reply{Error: err.Error()}
	}
	rep.ID = ctl.ID
	g.mu.Lock()
	g.controls = append(g.controls, ctl)
	if ctl.RestartGuest {
		g.pid++
		rep.GuestPID = g.pid
	}
	g.mu.Unlock()
	b, _ := json.Marshal(rep)
	_, _ = c.Write(append(b, '\n'))
}

func (g *fakeGuest) received() []initproto.Control {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]initproto.Control(nil), g.controls...)
}

func (g *fakeGuest) close() {
	g.once.Do(func() {
		close(g.quit)
		g.ln.Close()
		g.srv.Close()
		g.wg.Wait()
	})
}

// chanListener hands the HTTP server the connections accepted after a
// successful CONNECT handshake.
type chanListener struct{ g *fakeGuest }

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.g.conns:
		return c, nil
	case <-l.g.quit:
		return nil, net.ErrClosed
	}
}
func (l chanListener) Close() error   { return nil }
func (l chanListener) Addr() net.Addr { return l.g.ln.Addr() }

// fakeLauncher stands in for Firecracker: each Launch starts a real
// stand-in process (sleep) so pid, start time and signals behave as for a
// VMM, and serves a fakeFC at the API socket until that process exits.
// Jailed launches behave like the daemonizing jailer: the launched process
// is gone at once and the VMM's pid is in <jail root>/firecracker.pid.
type fakeLauncher struct {
	mu       sync.Mutex
	launches []LaunchSpec
	fakes    []*fakeFC
}

func (l *fakeLauncher) Launch(_ context.Context, spec LaunchSpec) (Process, error) {
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &execProcess{pid: cmd.Process.Pid, exited: make(chan struct{})}
	fc := newFakeFC(spec.Workdir, spec.Jailed)
	ln, err := net.Listen("unix", spec.APISocket)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	srv := &http.Server{Handler: fc}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		_ = cmd.Wait()
		srv.Close()
		fc.stop()
		close(p.exited)
	}()
	l.mu.Lock()
	l.launches = append(l.launches, spec)
	l.fakes = append(l.fakes, fc)
	l.mu.Unlock()
	if spec.Jailed {
		pidFile := filepath.Join(spec.Workdir, filePID)
		if err := os.WriteFile(pidFile, []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
			return nil, err
		}
		done := make(chan struct{})
		close(done)
		return &execProcess{pid: -1, exited: done}, nil
	}
	return p, nil
}

func (l *fakeLauncher) last() (LaunchSpec, *fakeFC, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fakes) == 0 {
		return LaunchSpec{}, nil, errors.New("nothing launched")
	}
	return l.launches[len(l.launches)-1], l.fakes[len(l.fakes)-1], nil
}
