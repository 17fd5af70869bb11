package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// world is what outlives a host agent: the machines its backend started.
type world struct {
	mu          sync.Mutex
	machines    map[string]*fakeMachine // by dir
	boots       int
	restores    int
	bootErr     error
	recoverFail map[string]int // dir -> Recover failures still to come
	pauseErr    error
	snapErr     error
	rootfs      bool       // the backend boots caller root filesystems
	harness     bool       // the backend attaches harness bundles
	specs       []vmm.Spec // every Boot and Restore spec, in order
	strays      []vmm.VMM  // VMMs running that no machine here is (a spawn nobody recorded)
	reaped      []vmm.VMM  // every VMM Reap killed
}

func newWorld() *world {
	return &world{machines: map[string]*fakeMachine{}, recoverFail: map[string]int{}}
}

// fakeBackend runs in-memory machines whose guest daemon is a tiny HTTP
// handler reached over net.Pipe.
type fakeBackend struct{ w *world }

func (b fakeBackend) Capabilities() vmm.Capabilities {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return vmm.Capabilities{Name: "fake", Version: "1.0", Acceleration: "none", Reason: "test", SnapshotMemory: true, SnapshotDisk: true, RootFS: b.w.rootfs, Harness: b.w.harness}
}

func (b fakeBackend) Boot(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.bootErr != nil {
		return nil, b.w.bootErr
	}
	b.w.boots++
	b.w.specs = append(b.w.specs, spec)
	m := newFakeMachine(b.w, spec, 1000+b.w.boots)
	for i := range m.mem[:64<<10] { // some memory touched, the rest zero
		m.mem[i] = byte(i*7 + len(spec.SessionID))
	}
	b.w.machines[spec.Dir] = m
	return m, nil
}

// Restore rebuilds a machine from the files Snapshot wrote.
func (b fakeBackend) Restore(_ context.Context, spec vmm.Spec, snap vmm.Snapshot) (vmm.Machine, error) {
	if snap.Backend != "fake" {
		return nil, fmt.Errorf("snapshot of backend %q: %w", snap.Backend, vmm.ErrUnsupported)
	}
	mem, err := os.ReadFile(snap.Files["memory"])
	if err != nil {
		return nil, err
	}
	var st fakeState
	b2, err := os.ReadFile(snap.Files["state"])
	if err == nil {
		err = json.Unmarshal(b2, &st)
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	hello, err := os.ReadFile(filepath.Join(snap.Files["disk"], "home", "hello.txt"))
	if err != nil {
		return nil, fmt.Errorf("read disk: %w", err)
	}
	if link, err := os.Readlink(filepath.Join(snap.Files["disk"], "link")); err != nil || link != "home/hello.txt" {
		return nil, fmt.Errorf("disk symlink: %q, %v", link, err)
	}
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	b.w.restores++
	b.w.specs = append(b.w.specs, spec)
	m := newFakeMachine(b.w, spec, 2000+b.w.restores)
	m.mem, m.applied, m.journal, m.disk = mem, st.Applied, st.Journal, string(hello)
	b.w.machines[spec.Dir] = m
	return m, nil
}

func (b fakeBackend) Recover(_ context.Context, dir string) (vmm.Machine, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if n := b.w.recoverFail[dir]; n > 0 {
		b.w.recoverFail[dir] = n - 1
		return nil, errors.New("qmp socket: connection refused")
	}
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

// VMMs lists the machines still running and the strays.
func (b fakeBackend) VMMs(context.Context, string) ([]vmm.VMM, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	out := slices.Clone(b.w.strays)
	for dir, m := range b.w.machines {
		select {
		case <-m.done:
		default:
			out = append(out, vmm.VMM{Dir: dir, Processes: []vmm.Process{{PID: m.info.PID}}})
		}
	}
	return out, nil
}

// Reap ends the machine v is, or drops the stray.
func (b fakeBackend) Reap(ctx context.Context, v vmm.VMM) error {
	b.w.mu.Lock()
	b.w.reaped = append(b.w.reaped, v)
	b.w.strays = slices.DeleteFunc(b.w.strays, func(s vmm.VMM) bool { return s.Dir == v.Dir && slices.Equal(s.Processes, v.Processes) })
	m := b.w.machines[v.Dir]
	b.w.mu.Unlock()
	if m != nil && slices.Contains(v.Processes, vmm.Process{PID: m.info.PID}) {
		return m.Destroy(ctx)
	}
	return nil
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

func (w *world) restoreCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restores
}

func (w *world) set(f func(w *world)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f(w)
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

// fakeState is what the fake keeps in its "state" snapshot file.
type fakeState struct {
	Applied int64    `json:"applied"`
	Journal []string `json:"journal"`
}

type fakeMachine struct {
	w         *world
	spec      vmm.Spec
	info      vmm.Info
	l         *pipeListener
	srv       *http.Server
	served    chan struct{}
	done      chan struct{}
	exitOnce  sync.Once
	destroyed chan struct{}

	mu        sync.Mutex // guards the fields below and Destroy
	mem       []byte
	disk      string
	paused    bool
	pauses    int
	resumes   int
	snapshots int
	syncs     int
	applied   int64
	journal   []string
}

// tapFDOf is where a fake VMM holds spec's TAP: 3, as QEMU does.
func tapFDOf(spec vmm.Spec) int {
	if spec.Network == nil {
		return 0
	}
	return 3
}

func newFakeMachine(w *world, spec vmm.Spec, pid int) *fakeMachine {
	m := &fakeMachine{
		w:         w,
		spec:      spec,
		info:      vmm.Info{SessionID: spec.SessionID, Backend: "fake", PID: pid, Dir: spec.Dir, Created: time.Unix(0, 0), TapFD: tapFDOf(spec)},
		l:         newPipeListener(),
		served:    make(chan struct{}),
		done:      make(chan struct{}),
		destroyed: make(chan struct{}),
		mem:       make([]byte, 3<<20),
		disk:      "hello from " + spec.SessionID,
	}
	m.srv = &http.Server{Handler: m.guestHandler()}
	go func() {
		defer close(m.served)
		_ = m.srv.Serve(m.l)
	}()
	return m
}

// guestHandler is a tiny guest daemon.
func (m *fakeMachine) guestHandler() http.Handler {
	sid := m.spec.SessionID
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(guestapi.Ready{Version: guestapi.Version, Hostname: sid, BootID: r.URL.RawQuery})
	})
	mux.HandleFunc("POST "+guestapi.PathSync, func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.syncs++
		m.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET "+guestapi.PathOutbox, func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		defer m.mu.Unlock()
		_ = json.NewEncoder(w).Encode(guestapi.OutboxState{Applied: m.applied})
	})
	mux.HandleFunc("POST "+guestapi.PathOutbox, func(w http.ResponseWriter, r *http.Request) {
		var in guestapi.OutboxApply
		if r.Header.Get(guestapi.HeaderVersion) != strconv.Itoa(guestapi.Version) || json.NewDecoder(r.Body).Decode(&in) != nil {
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(guestapi.ErrorBody{Error: "bad outbox request"})
			return
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, e := range in.Entries {
			if e.Seq == m.applied+1 {
				m.applied = e.Seq
				m.journal = append(m.journal, e.ID)
			} else if e.Seq > m.applied+1 {
				break
			}
		}
		_ = json.NewEncoder(w).Encode(guestapi.OutboxState{Applied: m.applied})
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

// Snapshot writes memory, state and a disk directory, and leaves the
// machine paused.
func (m *fakeMachine) Snapshot(_ context.Context, dir string) (vmm.Snapshot, error) {
	m.w.mu.Lock()
	snapErr := m.w.snapErr
	m.w.mu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = true
	if snapErr != nil {
		return vmm.Snapshot{}, snapErr
	}
	m.snapshots++
	files := map[string]string{
		"memory": filepath.Join(dir, "memory.bin"),
		"state":  filepath.Join(dir, "state.json"),
		"disk":   filepath.Join(dir, "rootfs"),
	}
	st, _ := json.Marshal(fakeState{Applied: m.applied, Journal: m.journal})
	if err := os.WriteFile(files["memory"], m.mem, 0o600); err != nil {
		return vmm.Snapshot{}, err
	}
	if err := os.WriteFile(files["state"], st, 0o600); err != nil {
		return vmm.Snapshot{}, err
	}
	home := filepath.Join(files["disk"], "home")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return vmm.Snapshot{}, err
	}
	if err := os.WriteFile(filepath.Join(home, "hello.txt"), []byte(m.disk), 0o644); err != nil {
		return vmm.Snapshot{}, err
	}
	if err := os.Symlink("home/hello.txt", filepath.Join(files["disk"], "link")); err != nil {
		return vmm.Snapshot{}, err
	}
	return vmm.Snapshot{Backend: "fake", Files: files, Taken: time.Now()}, nil
}

func (m *fakeMachine) Pause(context.Context) error {
	m.w.mu.Lock()
	err := m.w.pauseErr
	m.w.mu.Unlock()
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = true
	m.pauses++
	return nil
}

func (m *fakeMachine) Resume(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = false
	m.resumes++
	return nil
}

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

// setPaused sets the paused flag, as a VMM stopped by a previous agent.
func (m *fakeMachine) setPaused(p bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.paused = p
}

// counts are how often the machine was snapshotted and resumed.
func (m *fakeMachine) counts() (snapshots, resumes int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.snapshots, m.resumes
}

func (m *fakeMachine) isPaused() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.paused
}

// state returns a copy of the guest-visible state.
func (m *fakeMachine) state() (applied int64, journal string, mem []byte, syncs int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.applied, strings.Join(m.journal, ","), bytes.Clone(m.mem), m.syncs
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
