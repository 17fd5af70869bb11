package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
	"github.com/engrams/engrams/internal/vmm/process"
)

// binDir holds engrams and engrams-guest built once for the package.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "engrams-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go env GOMOD:", err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/engrams", "./cmd/engrams-guest", "./cmd/engrams-init")
	build.Dir = filepath.Dir(strings.TrimSpace(string(root)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build binaries: %v\n%s", err, out)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "engrams.db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openSQLiteFile(path string) (store.Store, error) {
	return sqlite.Open(context.Background(), sqlite.Config{Path: path}, sqlite.Deps{})
}

func openPostgres(t *testing.T, url string) store.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url}, postgres.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// replica is one running coordinator replica.
type replica struct {
	URL string
	srv *server.Server
}

// startReplica serves a replica on 127.0.0.1:0 until the test ends.
func startReplica(t *testing.T, st store.Store, secret string, co coordinator.Config) replica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return serveReplica(t, ln, st, secret, co)
}

// serveReplica serves a replica on ln until the test ends.
func serveReplica(t *testing.T, ln net.Listener, st store.Store, secret string, co coordinator.Config) replica {
	t.Helper()
	return serveReplicaWith(t, ln, st, secret, server.Config{Coordinator: co}, server.Deps{})
}

// serveReplicaWith is serveReplica with more configuration (the
// coordinator's, the harness registry's) and extra collaborators (Images,
// Secrets, the harness builder).
func serveReplicaWith(t *testing.T, ln net.Listener, st store.Store, secret string, cfg server.Config, extra server.Deps) replica {
	t.Helper()
	url := "http://" + ln.Addr().String()
	cfg.AdvertiseURL, cfg.ClusterSecret, cfg.Version = url, secret, "test"
	// The registries and model servers of these tests are on 127.0.0.1.
	if extra.Registries == nil {
		extra.Registries = loopbackGuard()
	}
	if extra.Models == nil {
		extra.Models = loopbackGuard()
	}
	srv, err := server.New(cfg,
		server.Deps{Store: st, Logger: testLogger(t).With("replica", url), Images: extra.Images, Secrets: extra.Secrets,
			HarnessBuilder: extra.HarnessBuilder, HarnessChunks: extra.HarnessChunks, Metrics: extra.Metrics,
			Registries: extra.Registries, Models: extra.Models, GitHosts: extra.GitHosts, BrokerRootCAs: extra.BrokerRootCAs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("replica %s: %v", url, err)
		}
	})
	return replica{URL: url, srv: srv}
}

// loopbackGuard is the address policy of `engrams dev`: loopback allowed.
func loopbackGuard() *netpolicy.Guard {
	return netpolicy.NewGuard(netpolicy.GuardConfig{Allow: netpolicy.LoopbackAllowances()})
}

// credentials mints a user token, and a host named hostName if not "".
func credentials(t *testing.T, st store.Store, hostName string) server.Credentials {
	t.Helper()
	c, err := server.EnsureCredentials(context.Background(), st, filepath.Join(t.TempDir(), "creds.json"), hostName)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// startHostInProcess runs a host agent with the process backend in this
// test process until the test ends.
func startHostInProcess(t *testing.T, url, token string) {
	t.Helper()
	log := testLogger(t).With("host", url)
	be := process.New(process.Config{GuestBinary: filepath.Join(binDir, "engrams-guest")}, process.Deps{Logger: log})
	dataDir := shortTempDir(t)
	t.Cleanup(func() { killGuests(dataDir) }) // runs after the agent stops
	agent, err := host.New(host.Config{CoordinatorURL: url, Token: token, Name: "inproc", DataDir: dataDir, HeartbeatInterval: 200 * time.Millisecond},
		host.Deps{Backend: be, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// hostProc is a host agent running as its own process, so it can be killed.
type hostProc struct {
	cmd     *exec.Cmd
	dataDir string
}

// startHostProcess runs `engrams host run` with the process backend unless
// extra names another --backend.
func startHostProcess(t *testing.T, url, token, dataDir string, extra ...string) *hostProc {
	t.Helper()
	return startHostWrapped(t, nil, url, token, dataDir, extra...)
}

// startHostWrapped is startHostProcess run through wrap (a command that
// execs its arguments, e.g. `ip netns exec NAME`), if not empty.
func startHostWrapped(t *testing.T, wrap []string, url, token, dataDir string, extra ...string) *hostProc {
	t.Helper()
	argv := append(append(wrap[:len(wrap):len(wrap)], filepath.Join(binDir, "engrams"), "host", "run", "--coordinator", url, "--token", token,
		"--data-dir", dataDir, "--backend", "process", "--log-level", "debug"), extra...)
	t.Cleanup(func() { killGuests(dataDir) }) // runs after the agent is killed
	cmd := exec.Command(argv[0], argv[1:]...)
	logf, err := os.OpenFile(hostLog(dataDir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start host agent %v: %v", argv, err)
	}
	p := &hostProc{cmd: cmd, dataDir: dataDir}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *hostProc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// shortTempDir is a temp dir with a short path: Unix socket paths under
// it (machines/<session id>/guest.sock) must stay under 108 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "eg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmountUnder(d); os.RemoveAll(d) })
	return d
}

// unmountUnder detaches every mount below dir: a host agent killed by a
// test leaves its lazy-memory mount behind (its connection is gone with it).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			_ = syscall.Unmount(f[1], syscall.MNT_DETACH)
		}
	}
}

// killGuests kills every guest daemon and VMM started under dataDir:
// machines outlive their host agent by design (a restarted agent reattaches
// them), so a test that ends by stopping its host must reap them.
func killGuests(dataDir string) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), dataDir+"/") {
			continue
		}
		if strings.Contains(string(cmd), "engrams-guest") || strings.Contains(string(cmd), "qemu-system") {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s (last: %s)", what, d, last)
}

// waitHostReady waits until the host registered and is ready (a QEMU host
// builds or checks its guest images first).
func waitHostReady(t *testing.T, c *client.Client, hostID string) {
	t.Helper()
	eventually(t, 120*time.Second, "host "+hostID+" ready", func() (bool, string) {
		h, err := c.Hosts().Get(context.Background(), hostID)
		return err == nil && h.State == "ready", h.State
	})
}

func newClient(url, token string) *client.Client { return client.New(url, token) }

var _ = testutil.InCI
