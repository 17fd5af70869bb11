package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/server"
)

// devFlags are the settings of `engrams dev`.
type devFlags struct {
	listen, dataDir, backend, logLevel string
	harnesses                          harnessFlags
}

func devCmd() *cobra.Command {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run coordinator + one host + embedded SQLite in one process",
		Long: `Run a complete single-machine engrams: a coordinator with an embedded SQLite
database, one host agent using the best backend this machine supports, and a
local data directory. State survives restarts. It prints the URL and writes a
CLI config so that other ` + "`engrams`" + ` commands find it without flags.`,
		Example: "  engrams dev\n  engrams dev --listen 127.0.0.1:8800 --data-dir /tmp/engrams --backend process",
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), cmd.OutOrStdout()) },
	}
	f.register(cmd.Flags())
	return cmd
}

func (f *devFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", env("LISTEN", "127.0.0.1:7700"), "address to serve on")
	fs.StringVar(&f.dataDir, "data-dir", env("DATA_DIR", defaultDataDir()), "where the database, machines and credentials live")
	fs.StringVar(&f.backend, "backend", env("BACKEND", "auto"), "auto, firecracker, qemu or process (process: development only, no isolation)")
	fs.StringVar(&f.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
	f.harnesses.register(fs, "", "")
}

// run serves the coordinator and runs the host agent until ctx ends; the
// URL and token go to out.
func (f *devFlags) run(ctx context.Context, out io.Writer) error {
	log, err := newLogger(os.Stderr, f.logLevel)
	if err != nil {
		return err
	}
	dataDir := f.dataDir
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	st, err := openStore(ctx, filepath.Join(dataDir, "engrams.db"), log)
	if err != nil {
		return err
	}
	defer st.Close()
	creds, err := server.EnsureCredentials(ctx, st, filepath.Join(dataDir, "credentials.json"), "dev")
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (is another `engrams dev` running? use --listen)", f.listen, err)
	}
	url := "http://" + ln.Addr().String()
	bs, err := localdir.New(localdir.Config{Dir: filepath.Join(dataDir, "blobs")}, localdir.Deps{Logger: log})
	if err != nil {
		return fmt.Errorf("blob store: %w", err)
	}
	if f.harnesses.workDir == "" {
		f.harnesses.workDir = filepath.Join(dataDir, "harness-work")
	}
	if f.harnesses.cacheDir == "" {
		f.harnesses.cacheDir = filepath.Join(dataDir, "harness-cache")
	}
	srv, closeSrv, err := newServer(server.Config{AdvertiseURL: url, Version: version},
		serverParts{store: st, blobs: bs, imageWork: filepath.Join(dataDir, "image-work"), harnesses: &f.harnesses,
			keyFile: filepath.Join(dataDir, "secrets.keyset"), createKey: true, log: log.With("component", "coordinator")}, log)
	if err != nil {
		return err
	}
	defer closeSrv()
	agent, closeChunks, err := f.hostAgent(ctx, bs, url, creds.HostToken, log)
	if err != nil {
		return err
	}
	defer closeChunks()
	cfgPath, err := cli.DefaultConfigPath()
	if err == nil {
		err = cli.WriteClientConfig(cfgPath, url, creds.Token)
	}
	if err != nil {
		return fmt.Errorf("write CLI config: %w", err)
	}
	fmt.Fprintf(out, "engrams dev is running\n  URL:   %s\n  token: %s\n  data:  %s\n  CLI config: %s\nTry: engrams session create\n", url, creds.Token, dataDir, cfgPath)
	gc := func(ctx context.Context) error { return srv.Coordinator().RunGC(ctx, bs, coordinator.GCConfig{}) }
	return runBoth(ctx, func(ctx context.Context) error { return srv.Run(ctx, ln) }, agent.Run, gc)
}

// hostAgent makes the dev host agent (named dev, its machines in the data
// dir's host/) over bs; closeChunks releases its chunk cache.
func (f *devFlags) hostAgent(ctx context.Context, bs blob.Store, url, token string, log *slog.Logger) (agent *host.Agent, closeChunks func(), err error) {
	hostDir := filepath.Join(f.dataDir, "host")
	be, err := pickBackend(ctx, f.backend, hostDir, log.With("component", "vmm"))
	if err != nil {
		return nil, nil, err
	}
	deps, closeChunks, err := hostChunks(bs, hostDir, 10240, log.With("component", "chunks"))
	if err != nil {
		return nil, nil, err
	}
	deps.Backend, deps.Logger, deps.Checkpoint = be.backend, log.With("component", "host"), testCheckpoint(log)
	agent, err = host.New(host.Config{CoordinatorURL: url, Token: token, Name: "dev", DataDir: hostDir, AgentVersion: version, Considered: be.considered}, deps)
	if err != nil {
		closeChunks()
		return nil, nil, err
	}
	return agent, closeChunks, nil
}

// runBoth runs the functions until ctx ends or one fails, then stops and
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
