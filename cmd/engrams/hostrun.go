package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/metrics"
)

type hostFlags struct {
	coordinator, token, tokenFile, name, dataDir, backend, logLevel string
	logFormat, opsAddr, evictIdleAfter, lazyMemory                  string
	capacity                                                        domain.Capacity
	blobs                                                           blobFlags
	cacheMiB                                                        int64
	egress                                                          egressFlags
}

func hostRunCmd() *cobra.Command {
	var hf hostFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the host agent on this machine",
		Long: `Run the host agent: it dials the coordinator (no inbound port is needed),
registers this machine's facts and capacity, heartbeats, and runs sessions'
machines with the best backend this machine supports.

Create the host's credential first with ` + "`engrams host create NAME`" + `.`,
		Example: `  engrams host run --coordinator https://engrams.example.com --token-file /etc/engrams/host-token
  ENGRAMS_COORDINATOR=http://127.0.0.1:7700 ENGRAMS_HOST_TOKEN=egr_... engrams host run --backend process`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return hf.run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.StringVar(&hf.coordinator, "coordinator", env("COORDINATOR", ""), "coordinator base URL")
	f.StringVar(&hf.token, "token", env("HOST_TOKEN", ""), "host token (from engrams host create NAME)")
	f.StringVar(&hf.tokenFile, "token-file", env("HOST_TOKEN_FILE", ""), "file holding the host token")
	f.StringVar(&hf.name, "name", env("HOST_NAME", hostname()), "name reported by this host")
	f.StringVar(&hf.dataDir, "data-dir", env("HOST_DATA_DIR", filepath.Join(defaultDataDir(), "host")), "where machines, epochs and caches live")
	f.StringVar(&hf.backend, "backend", env("BACKEND", "auto"), "auto, firecracker, qemu or process (process: development only, no isolation)")
	f.StringVar(&hf.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
	f.StringVar(&hf.logFormat, "log-format", env("LOG_FORMAT", "text"), "text, or json (one object per line)")
	hf.egress.register(f)
	f.StringVar(&hf.opsAddr, "ops-addr", env("OPS_ADDR", ""), "serve /healthz, /readyz (the coordinator link is up) and /metrics on this address, e.g. 127.0.0.1:9180 (default: none)")
	f.IntVar(&hf.capacity.MemoryMiB, "memory-mib", 0, "memory offered to sessions (default: all of this machine's)")
	f.IntVar(&hf.capacity.VCPUs, "vcpus", 0, "vCPUs offered to sessions (default: this machine's CPU count)")
	f.IntVar(&hf.capacity.MaxSessions, "max-sessions", 0, "most sessions at once (default: no limit)")
	f.StringVar(&hf.evictIdleAfter, "evict-idle-after", env("EVICT_IDLE_AFTER", ""), "when every host is full, the coordinator may suspend a session of this host idle this long to make room, e.g. 5m (never: don't; default: the server's --evict-idle-after)")
	f.Int64Var(&hf.cacheMiB, "chunk-cache-mib", 10240, "disk budget of the local snapshot chunk cache")
	f.StringVar(&hf.lazyMemory, "lazy-memory", env("LAZY_MEMORY", "off"), lazyMemoryHelp)
	hf.blobs.register(f, "")
	return cmd
}

// run runs the agent (and its operations listener) until ctx ends.
func (hf *hostFlags) run(ctx context.Context) error {
	log, err := newLogger(os.Stderr, hf.logLevel, hf.logFormat)
	if err != nil {
		return err
	}
	token := hf.token
	if hf.tokenFile != "" {
		b, err := os.ReadFile(hf.tokenFile)
		if err != nil {
			return fmt.Errorf("read --token-file: %w", err)
		}
		warnAccessible(log, "--token-file", hf.tokenFile)
		token = string(trimSpace(b))
	}
	if hf.coordinator == "" || token == "" {
		return errors.New("--coordinator and --token (or --token-file) are required; create a host token with `engrams host create NAME`")
	}
	if hf.capacity.EvictIdleAfterSec, err = evictFloor(hf.evictIdleAfter); err != nil {
		return err
	}
	warnAccessible(log, "--data-dir", hf.dataDir)
	// Before anything opens the data dir: the chunk cache and backends
	// clean what they find there.
	lock, err := host.LockDataDir(hf.dataDir)
	if err != nil {
		return fmt.Errorf("host run: %w", err)
	}
	defer lock.Close()
	opsLn, err := listenOps(hf.opsAddr)
	if err != nil {
		return err
	}
	if opsLn != nil {
		defer opsLn.Close()
	}
	be, err := pickBackend(ctx, hf.backend, hf.dataDir, log)
	if err != nil {
		return err
	}
	if hf.blobs.dir == "" && hf.blobs.s3Endpoint == "" {
		hf.blobs.dir = filepath.Join(hf.dataDir, "blobs")
		log.Info("snapshot chunks go to a local directory: sessions resume only on this host (share an S3 store, --s3-endpoint, to resume anywhere)", "dir", hf.blobs.dir)
	}
	bs, err := hf.blobs.open(ctx, log)
	if err != nil {
		return err
	}
	reg := metrics.New()
	deps, closeChunks, err := hostChunks(bs, hf.dataDir, hf.cacheMiB, reg, log)
	if err != nil {
		return err
	}
	defer closeChunks()
	deps.Backend, deps.Logger, deps.Checkpoint, deps.DataDirLock = be.backend, log, testCheckpoint(log), lock
	var closePager func()
	if deps.Pager, closePager, err = lazyMemory(hf.lazyMemory, hf.dataDir, be.backend.Capabilities(), log); err != nil {
		return err
	}
	defer closePager()
	if deps.Network, err = egressNetwork(be.backend.Capabilities(), hf.coordinator, []string{hf.opsAddr}, hf.egress, reg, log); err != nil {
		return err
	}
	agent, err := host.New(host.Config{CoordinatorURL: hf.coordinator, Token: token, Name: hf.name, DataDir: hf.dataDir, AgentVersion: version, Considered: be.considered, Capacity: hf.capacity}, deps)
	if err != nil {
		return err
	}
	ops := reg.OpsHandler(metrics.Check{Name: "host_link", Ready: agent.Ready})
	return runBoth(ctx, agent.Run, func(ctx context.Context) error { return serveOps(ctx, opsLn, ops, log) })
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// evictFloor reads --evict-idle-after as the seconds a host reports
// (domain.Capacity.EvictIdleAfterSec): "" for the server's default (0),
// "never" (-1), or a duration of at least a second.
func evictFloor(v string) (int, error) {
	switch v {
	case "", "0":
		return 0, nil
	case "never":
		return -1, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Second {
		return 0, fmt.Errorf("--evict-idle-after %q: want a duration of at least 1s, e.g. 5m, or never", v)
	}
	return int(d / time.Second), nil
}
