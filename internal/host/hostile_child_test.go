package host_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/vmm"
)

// The hostile-guest test runs the host agent as a child process (this test
// binary again), so its memory is measured alone: the guests it serves are
// stand-ins in the test process, reached over one Unix socket each.
const (
	hostileChildEnv = "ENGRAMS_TEST_HOSTILE_CHILD" // set: be the host agent
	hostileCoordEnv = "ENGRAMS_TEST_HOSTILE_COORDINATOR"
	hostileDataEnv  = "ENGRAMS_TEST_HOSTILE_DATA"
	hostileSockEnv  = "ENGRAMS_TEST_HOSTILE_SOCKETS"
)

// runHostileChild is the child's main: a host agent over sockBackend until
// SIGTERM.
func runHostileChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := host.New(host.Config{
		CoordinatorURL: os.Getenv(hostileCoordEnv), Token: "tok", Name: "hostile", DataDir: os.Getenv(hostileDataEnv),
		HeartbeatInterval: time.Hour, Capacity: domain.Capacity{MemoryMiB: 1 << 20, VCPUs: 1024}, AgentVersion: "test",
	}, host.Deps{Backend: &sockBackend{dir: os.Getenv(hostileSockEnv)}, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// sockBackend boots machines whose guest daemon listens on dir/<session>.sock.
type sockBackend struct{ dir string }

func (b *sockBackend) Capabilities() vmm.Capabilities {
	return vmm.Capabilities{Name: "sock", Version: "1", Acceleration: "none", Harness: true}
}

func (b *sockBackend) Boot(_ context.Context, spec vmm.Spec) (vmm.Machine, error) {
	return &sockMachine{info: vmm.Info{SessionID: spec.SessionID, Dir: spec.Dir, PID: os.Getpid()},
		sock: filepath.Join(b.dir, spec.SessionID+".sock"), done: make(chan struct{})}, nil
}

func (b *sockBackend) Restore(context.Context, vmm.Spec, vmm.Snapshot) (vmm.Machine, error) {
	return nil, vmm.ErrUnsupported
}

func (b *sockBackend) Recover(context.Context, string) (vmm.Machine, error) { return nil, vmm.ErrGone }

type sockMachine struct {
	info vmm.Info
	sock string
	once sync.Once
	done chan struct{}
}

func (m *sockMachine) Info() vmm.Info { return m.info }

func (m *sockMachine) Dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", m.sock)
}

func (m *sockMachine) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}
func (m *sockMachine) Pause(context.Context) error  { return nil }
func (m *sockMachine) Resume(context.Context) error { return nil }
func (m *sockMachine) Done() <-chan struct{}        { return m.done }
func (m *sockMachine) Destroy(context.Context) error {
	m.once.Do(func() { close(m.done) })
	return nil
}
