package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// devFlags are the settings of `engrams dev`.
type devFlags struct {
	listen, dataDir, backend, logLevel string
	logFormat, opsAddr, lazyMemory     string
	stopTimeout                        time.Duration
	egress                             egressFlags
	harnesses                          harnessFlags
	policy                             policyFlags
}

func devCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run coordinator + one host + embedded SQLite in one process",
		Long: `Run a complete single-machine engrams: a coordinator with an embedded SQLite
database, one host agent using the best backend this machine supports, and a
local data directory. State survives restarts. It prints a banner (its URL, a
link that signs the dashboard in, where it wrote the CLI config so that other
` + "`engrams`" + ` commands find it without flags), then logs warnings and errors
(--log-level info or debug for more).

Ctrl-C (or SIGTERM) suspends every running session, showing each as it is
done, and stops: their state survives and no VM keeps running. A second Ctrl-C
stops at once and lists the sessions it left running.`,
		Example: "  engrams dev\n  engrams dev --listen 127.0.0.1:8800 --data-dir /tmp/engrams --backend process",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			return f.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), sigs)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (f *devFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", env("LISTEN", "127.0.0.1:7700"), "address to serve on")
	fs.StringVar(&f.dataDir, "data-dir", env("DATA_DIR", defaultDataDir()), "where the database, machines and credentials live")
	fs.StringVar(&f.backend, "backend", env("BACKEND", "auto"), "auto, firecracker, qemu or process (process: development only, no isolation)")
	fs.StringVar(&f.logLevel, "log-level", env("LOG_LEVEL", "warn"), "debug, info, warn or error (debug adds the automation engine's internals)")
	fs.StringVar(&f.logFormat, "log-format", env("LOG_FORMAT", "text"), "text, or json (one object per line)")
	f.egress.register(fs)
	fs.StringVar(&f.opsAddr, "ops-addr", env("OPS_ADDR", ""), "also serve /healthz, /readyz and /metrics on this address (they are always on --listen too)")
	fs.StringVar(&f.lazyMemory, "lazy-memory", env("LAZY_MEMORY", "off"), lazyMemoryHelp)
	fs.DurationVar(&f.stopTimeout, "stop-timeout", envDuration("STOP_TIMEOUT", 2*time.Minute), "at Ctrl-C, how long suspending the running sessions may take before dev stops anyway")
	f.harnesses.register(fs, "", "")
	f.policy.register(fs)
}

// devRig is what dev runs: the replica, its host agent and their blob store.
type devRig struct {
	srv   *server.Server
	agent *host.Agent
	bs    blob.Store
}

// run serves the coordinator and runs the host agent until the first of
// sigs, then suspends the sessions (devStop); the URL and token go to out,
// the progress of stopping to errOut.
func (f *devFlags) run(ctx context.Context, out, errOut io.Writer, sigs <-chan os.Signal) error {
	log, err := newLogger(os.Stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	warnAccessible(log, "--data-dir", f.dataDir)
	opsLn, err := listenOps(f.opsAddr)
	if err != nil {
		return err
	}
	if opsLn != nil {
		defer opsLn.Close()
	}
	st, err := openStore(ctx, filepath.Join(f.dataDir, "engrams.db"), log)
	if err != nil {
		return err
	}
	defer st.Close()
	creds, err := server.EnsureCredentials(ctx, st, filepath.Join(f.dataDir, "credentials.json"), "dev")
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another `engrams dev` running? use --listen)", f.listen, err)
	}
	url := "http://" + ln.Addr().String()
	policy, err := f.policy.guards(true, ownPorts(ln, opsLn), log)
	if err != nil {
		ln.Close()
		return err
	}
	rig, closeRig, err := f.assemble(ctx, st, url, creds.HostToken, policy, log)
	if err != nil {
		ln.Close()
		return err
	}
	defer closeRig()
	cfgPath, err := cli.DefaultConfigPath()
	if err == nil {
		err = cli.WriteClientConfig(cfgPath, url, creds.Token)
	}
	if err != nil {
		return fmt.Errorf("write CLI config: %w", err)
	}
	printBanner(out, banner{url: url, login: rig.srv.Dashboard().LoginURL(url), config: cfgPath, data: f.dataDir, logLevel: f.logLevel})
	stop := &devStop{co: rig.srv.Coordinator(), reads: st, out: errOut, timeout: f.stopTimeout}
	// The parts outlive ctx (the first signal ends it): stop decides when
	// they end.
	return runBoth(context.WithoutCancel(ctx),
		func(ctx context.Context) error { return rig.srv.Run(ctx, ln) },
		rig.agent.Run,
		func(ctx context.Context) error {
			return rig.srv.Coordinator().RunGC(ctx, rig.bs, coordinator.GCConfig{})
		},
		func(ctx context.Context) error { return serveOps(ctx, opsLn, rig.srv.OpsHandler(), log) },
		stop.watch(sigs))
}

// banner is what dev prints once it serves.
type banner struct{ url, login, config, data, logLevel string }

// printBanner says where dev serves, how to sign the browser in, where the
// CLI's config (URL and token) went and what the log shows.
func printBanner(w io.Writer, b banner) {
	logs := "warnings and errors (--log-level info or debug shows more)"
	switch strings.ToLower(b.logLevel) {
	case "debug":
		logs = "everything, the automation engine's internals too"
	case "info":
		logs = "what happens (--log-level debug shows the automation engine's internals too)"
	case "error":
		logs = "errors only"
	}
	fmt.Fprintf(w, `engrams dev is running at %s
  dashboard:  %s  (signs this browser in: once, within 15 minutes)
  CLI config: %s  (its URL and token: engrams commands need no flags)
  data:       %s
  logs:       %s
Try: engrams session create
`, b.url, b.login, b.config, b.data, logs)
}

// assemble makes dev's blob store, host agent and replica over st, one
// metrics registry for both; closeAll releases them.
func (f *devFlags) assemble(ctx context.Context, st store.Store, url, hostToken string, policy addrPolicy, log *slog.Logger) (rig devRig, closeAll func(), err error) {
	rig.bs, err = localdir.New(localdir.Config{Dir: filepath.Join(f.dataDir, "blobs")}, localdir.Deps{Logger: log})
	if err != nil {
		return rig, nil, fmt.Errorf("blob store: %w", err)
	}
	if f.harnesses.workDir == "" {
		f.harnesses.workDir = filepath.Join(f.dataDir, "harness-work")
	}
	if f.harnesses.cacheDir == "" {
		f.harnesses.cacheDir = filepath.Join(f.dataDir, "harness-cache")
	}
	reg := metrics.New()
	agent, closeChunks, err := f.hostAgent(ctx, rig.bs, url, hostToken, reg, log)
	if err != nil {
		return rig, nil, err
	}
	rig.agent = agent
	keyFile := filepath.Join(f.dataDir, "secrets.keyset")
	srv, closeSrv, err := newServer(server.Config{AdvertiseURL: url, Version: version, Automations: devAutomations(filepath.Join(f.dataDir, "engrams.db"), f.logLevel)},
		serverParts{store: st, blobs: rig.bs, imageWork: filepath.Join(f.dataDir, "image-work"), harnesses: &f.harnesses,
			keyFile: keyFile, createKey: true, policy: policy, metrics: reg, ready: []metrics.Check{{Name: "host_link", Ready: agent.Ready}},
			log: log.With("component", "coordinator")}, log)
	if err != nil {
		closeChunks()
		return rig, nil, err
	}
	warnAccessible(log, "secrets key", keyFile)
	rig.srv = srv
	return rig, func() { closeSrv(); closeChunks() }, nil
}

// hostAgent makes the dev host agent (named dev, its machines in the data
// dir's host/, held for it) over bs; release lets its chunk cache and the
// host dir go.
func (f *devFlags) hostAgent(ctx context.Context, bs blob.Store, url, token string, reg *metrics.Registry, log *slog.Logger) (agent *host.Agent, release func(), err error) {
	hostDir := filepath.Join(f.dataDir, "host")
	// Before anything opens the host dir: the chunk cache and backends
	// clean what they find there.
	lock, err := host.LockDataDir(hostDir)
	if err != nil {
		return nil, nil, err
	}
	be, err := pickBackend(ctx, f.backend, hostDir, log.With("component", "vmm"))
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	deps, closeChunks, err := hostChunks(bs, hostDir, 10240, reg, log.With("component", "chunks"))
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	release = func() { closeChunks(); lock.Close() }
	deps.Backend, deps.Logger, deps.Checkpoint, deps.DataDirLock = be.backend, log.With("component", "host"), testCheckpoint(log), lock
	if deps.Network, err = egressNetwork(be.backend.Capabilities(), url, []string{f.listen, f.opsAddr}, f.egress, reg, log); err != nil {
		release()
		return nil, nil, err
	}
	var closePager func()
	if deps.Pager, closePager, err = lazyMemory(f.lazyMemory, hostDir, be.backend.Capabilities(), log.With("component", "host")); err != nil {
		release()
		return nil, nil, err
	}
	prev := release
	release = func() { closePager(); prev() }
	agent, err = host.New(host.Config{CoordinatorURL: url, Token: token, Name: "dev", DataDir: hostDir, AgentVersion: version, Considered: be.considered}, deps)
	if err != nil {
		release()
		return nil, nil, err
	}
	return agent, release, nil
}

// runBoth runs the functions until ctx ends or one returns, then stops and
// joins the others, returning the first error.
func runBoth(ctx context.Context, fns ...func(context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				errs <- err
			}
			cancel()
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
