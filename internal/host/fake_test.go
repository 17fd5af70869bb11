package host_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// world is what outlives a host agent: the machines its backend started.
type world struct {
	mu       sync.Mutex
	machines map[string]*fakeMachine // by dir
	boots    int
	bootErr  error
}

func newWorld() *world { return &world{machines: map[string]*fakeMachine{}} }

// fakeBackend runs in-memory machines whose guest daemon is a tiny HTTP
// handler reached over net.Pipe.
type fakeBackend struct{ w *world }

func (b fakeBackend) Capabilities() vmm.Capabilities {
	return vmm.Capabilities{Name: "fake", Version: "1.0", Acceleration: "none", Reason: "test"}
}

func (b fakeBackend) Boot(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.bootErr != nil {
		return nil, b.w.bootErr
	}
	b.w.boots++
	m := newFakeMachine(spec, 1000+b.w.boots)
	b.w.machines[spec.Dir] = m
	return m, nil
}

func (b fakeBackend) Restore(context.Context, vmm.Spec, vmm.Snapshot) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}

func (b fakeBackend) Recover(_ context.Context, dir string) (vmm.Machine, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	m, ok := b.w.machines[dir]
	if !ok || m.isDestroyed() {
		return nil, vmm.ErrGone
	}
	select {
	case <-m.done:
		return nil, vmm.ErrGone
	default:
	}
	return m, nil
}

// machine looks up the machine booted for session sid under dataDir.
func (w *world) machine(dataDir, sid string) *fakeMachine {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.machines[filepath.Join(dataDir, "machines", sid)]
}

func (w *world) bootCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.boots
}

// destroyAll ends every machine (test cleanup).
func (w *world) destroyAll() {
	w.mu.Lock()
	ms := make([]*fakeMachine, 0, len(w.machines))
	for _, m := range w.machines {
		ms = append(ms, m)
	}
	w.mu.Unlock()
	for _, m := range ms {
		_ = m.Destroy(context.Background())
	}
}

type fakeMachine struct {
	spec      vmm.Spec
	info      vmm.Info
	l         *pipeListener
	srv       *http.Server
	served    chan struct{}
	done      chan struct{}
	exitOnce  sync.Once
	mu        sync.Mutex
	destroyed chan struct{}
}

func newFakeMachine(spec vmm.Spec, pid int) *fakeMachine {
	m := &fakeMachine{
		spec:      spec,
		info:      vmm.Info{SessionID: spec.SessionID, Backend: "fake", PID: pid, Dir: spec.Dir, Created: time.Unix(0, 0)},
		l:         newPipeListener(),
		served:    make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
	}
	m.srv = &http.Server{Handler: guestHandler(spec.SessionID)}
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(m.l)
	}()
	return m
}

// guestHandler is a tiny guest daemon.
func guestHandler(sid string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(guestapi.Ready{Version: guestapi.Version, Hostname: sid, BootID: r.URL.RawQuery})
	})
	mux.HandleFunc("GET "+guestapi.PathExec, func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, b, err := c.Read(r.Context())
			if err != nil {
				return
			}
			if err := c.Write(r.Context(), typ, append([]byte(sid+":"), b...)); err != nil {
				return
			}
		}
	})
	return mux
}

func (m *fakeMachine) Info() vmm.Info { return m.info }

func (m *fakeMachine) Dial(ctx context.Context) (net.Conn, error) {
	if m.isDestroyed() {
		return nil, errors.New("machine destroyed")
	}
	return m.l.dial(ctx)
}

func (m *fakeMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}

func (m *fakeMachine) Resume(context.Context) error { return vmm.ErrUnsupported }

func (m *fakeMachine) Destroy(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.destroyed:
		return nil
	default:
	}
	close(m.destroyed)
	m.exit()
	_ = m.srv.Close()
	<-m.served
	return nil
}

// exit ends the machine on its own.
func (m *fakeMachine) exit() { m.exitOnce.Do(func() { close(m.done) }) }

func (m *fakeMachine) Done() <-chan struct{} { return m.done }

func (m *fakeMachine) isDestroyed() bool {
	select {
	case <-m.destroyed:
		return true
	default:
		return false
	}
}

// pipeListener hands out in-memory connections.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial(ctx context.Context) (net.Conn, error) {
	c1, c2 := net.Pipe()
	select {
	case l.conns <- c2:
		return c1, nil
	case <-l.closed:
		return nil, errors.New("connection refused")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
