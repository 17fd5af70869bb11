package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/blob/localdir"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/server"
)

func devCmd() *cobra.Command {
	var listen, dataDir, backend, logLevel string
	var harnesses harnessFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run coordinator + one host + embedded SQLite in one process",
		Long: `Run a complete single-machine engrams: a coordinator with an embedded SQLite
database, one host agent using the best backend this machine supports, and a
local data directory. State survives restarts. It prints the URL and writes a
CLI config so that other ` + "`engrams`" + ` commands find it without flags.`,
		Example: "  engrams dev\n  engrams dev --listen 127.0.0.1:8800 --data-dir /tmp/engrams --backend process",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
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
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w (is another `engrams dev` running? use --listen)", listen, err)
			}
			url := "http://" + ln.Addr().String()
			bs, err := localdir.New(localdir.Config{Dir: filepath.Join(dataDir, "blobs")}, localdir.Deps{Logger: log})
			if err != nil {
				return fmt.Errorf("blob store: %w", err)
			}
			images, closeImages, err := imageMaterializer(bs, filepath.Join(dataDir, "image-work"), log.With("component", "images"))
			if err != nil {
				return err
			}
			defer closeImages()
			var co coordinator.Config
			if harnesses.workDir == "" {
				harnesses.workDir = filepath.Join(dataDir, "harness-work")
			}
			if harnesses.cacheDir == "" {
				harnesses.cacheDir = filepath.Join(dataDir, "harness-cache")
			}
			hb, hc, closeHarnesses, err := harnesses.open(bs, &co, log.With("component", "harnesses"))
			if err != nil {
				return err
			}
			defer closeHarnesses()
			sealer, err := secrets(filepath.Join(dataDir, "secrets.keyset"), true)
			if err != nil {
				return err
			}
			srv, err := server.New(server.Config{AdvertiseURL: url, Version: version, Coordinator: co},
				server.Deps{Store: st, Logger: log.With("component", "coordinator"), Images: images, Secrets: sealer,
					HarnessBuilder: hb, HarnessChunks: hc})
			if err != nil {
				return err
			}
			be, err := pickBackend(ctx, backend, filepath.Join(dataDir, "host"), log.With("component", "vmm"))
			if err != nil {
				return err
			}
			deps, closeChunks, err := hostChunks(bs, filepath.Join(dataDir, "host"), 10240, log.With("component", "chunks"))
			if err != nil {
				return err
			}
			defer closeChunks()
			deps.Backend, deps.Logger = be.backend, log.With("component", "host")
			agent, err := host.New(host.Config{CoordinatorURL: url, Token: creds.HostToken, Name: "dev", DataDir: filepath.Join(dataDir, "host"), AgentVersion: version, Considered: be.considered}, deps)
			if err != nil {
				return err
			}
			cfgPath, err := cli.DefaultConfigPath()
			if err == nil {
				err = cli.WriteClientConfig(cfgPath, url, creds.Token)
			}
			if err != nil {
				return fmt.Errorf("write CLI config: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "engrams dev is running\n  URL:   %s\n  token: %s\n  data:  %s\n  CLI config: %s\nTry: engrams session create\n", url, creds.Token, dataDir, cfgPath)
			gc := func(ctx context.Context) error { return srv.Coordinator().RunGC(ctx, bs, coordinator.GCConfig{}) }
			return runBoth(ctx, func(ctx context.Context) error { return srv.Run(ctx, ln) }, agent.Run, gc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", env("LISTEN", "127.0.0.1:7700"), "address to serve on")
	f.StringVar(&dataDir, "data-dir", env("DATA_DIR", defaultDataDir()), "where the database, machines and credentials live")
	f.StringVar(&backend, "backend", env("BACKEND", "auto"), "auto, firecracker, qemu or process (process: development only, no isolation)")
	f.StringVar(&logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
	harnesses.register(f, "", "")
	return cmd
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
