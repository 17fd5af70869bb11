package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
)

// serverFlags are the settings of `engrams server`.
type serverFlags struct {
	listen, advertise, database, replicaID, secret, tokenFile, logLevel string
	imageWork, keyFile                                                  string
	secretFile, logFormat, opsAddr                                      string
	co                                                                  coordinator.Config
	blobs                                                               blobFlags
	harnesses                                                           harnessFlags
	policy                                                              policyFlags
	signin                                                              signinFlags
}

func serverCmd() *cobra.Command {
	var f serverFlags
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a coordinator replica",
		Long: `Run one coordinator replica: the public API, the endpoint hosts dial, and
the lifecycle engine. Replicas are stateless: run several against one Postgres
database behind a load balancer, with the same --cluster-secret, each with an
--advertise-url the others can reach.

Every flag can also be set as ENGRAMS_<FLAG> (e.g. ENGRAMS_DATABASE).`,
		Example: `  engrams server --database postgres://engrams@db/engrams --listen :7700 \
    --advertise-url http://10.0.0.5:7700 --cluster-secret-file /etc/engrams/cluster-secret \
    --bootstrap-token-file /var/lib/engrams/admin-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd.Context(), cmd.ErrOrStderr()) },
	}
	f.register(cmd.Flags())
	return cmd
}

func (f *serverFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.listen, "listen", env("LISTEN", "127.0.0.1:7700"), "address to serve the API and host links on")
	fs.StringVar(&f.advertise, "advertise-url", env("ADVERTISE_URL", ""), "URL other replicas use to reach this one (default http://<listen address>)")
	fs.StringVar(&f.database, "database", env("DATABASE", ""), "postgres:// URL, or the path of an SQLite file")
	fs.StringVar(&f.replicaID, "replica-id", env("REPLICA_ID", ""), "unique name of this replica (default: random)")
	fs.StringVar(&f.secret, "cluster-secret", env("CLUSTER_SECRET", ""), fmt.Sprintf("secret shared by replicas to forward host traffic (at least %d characters, e.g. `openssl rand -hex 32`)", minClusterSecret))
	fs.StringVar(&f.secretFile, "cluster-secret-file", env("CLUSTER_SECRET_FILE", ""), "file holding --cluster-secret (its trailing newline dropped), which keeps it out of the process list")
	fs.StringVar(&f.tokenFile, "bootstrap-token-file", env("BOOTSTRAP_TOKEN_FILE", ""), "mint an admin API token into this file (0600) unless the one there is valid")
	fs.StringVar(&f.logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", env("LOG_FORMAT", "text"), "text, or json (one object per line)")
	fs.StringVar(&f.opsAddr, "ops-addr", env("OPS_ADDR", ""), "also serve /healthz, /readyz and /metrics on this address (they are always on --listen too)")
	fs.DurationVar(&f.co.HostLostAfter, "host-lost-after", envDuration("HOST_LOST_AFTER", 0), "a host without heartbeats this long is lost (default 15s)")
	fs.DurationVar(&f.co.IdleTimeout, "idle-timeout", envDuration("IDLE_TIMEOUT", 0), "suspend sessions idle this long (default 10m; per session: idle_timeout_s)")
	fs.DurationVar(&f.co.EvictIdleAfter, "evict-idle-after", envDuration("EVICT_IDLE_AFTER", 0), "when every host is full, suspend the least recently used session idle this long to make room (default 1m; negative: never; per host: engrams host run --evict-idle-after)")
	fs.DurationVar(&f.co.QueueWait, "queue-wait", envDuration("QUEUE_WAIT", 0), "how long a create or resume waits for room on a full host before it is refused with 503 and Retry-After (default 1m)")
	fs.DurationVar(&f.co.MaxLifetime, "max-lifetime", envDuration("MAX_LIFETIME", 0), "end sessions dead this long after creation (default: no limit; per session: max_lifetime_s)")
	f.blobs.register(fs, "")
	fs.StringVar(&f.imageWork, "image-work-dir", env("IMAGE_WORK_DIR", filepath.Join(os.TempDir(), "engrams-images")), "scratch space for enabling images (an image's tree and root filesystem while it is built)")
	harnessWork := filepath.Join(os.TempDir(), "engrams-harnesses")
	f.harnesses.register(fs, harnessWork, defaultHarnessCache(harnessWork))
	fs.StringVar(&f.keyFile, "secrets-key-file", env("SECRETS_KEY_FILE", ""), "key sealing secrets and registry credentials at rest (engrams secrets-key create FILE; with SQLite it is created on first use; rotate it with engrams secrets-key rotate); without it no secrets can be kept. Every replica needs the same file")
	fs.DurationVar(&f.co.HeartbeatInterval, "heartbeat-interval", envDuration("HEARTBEAT_INTERVAL", 0), "how often hosts heartbeat (default 2s)")
	f.policy.register(fs)
	f.signin.register(fs)
}

// run serves the replica until ctx ends; notes for the operator go to
// stderr.
func (f *serverFlags) run(ctx context.Context, stderr io.Writer) error {
	log, err := newLogger(os.Stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if f.secret, err = secretFlag("cluster-secret", f.secret, f.secretFile, log); err != nil {
		return err
	}
	if err := checkClusterSecret(f.secret); err != nil {
		return err
	}
	warnAccessible(log, "--secrets-key-file", f.keyFile)
	opsLn, err := listenOps(f.opsAddr)
	if err != nil {
		return err
	}
	if opsLn != nil {
		defer opsLn.Close()
	}
	st, err := openStore(ctx, f.database, log)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", f.listen, err)
	}
	if f.advertise == "" {
		f.advertise = "http://" + ln.Addr().String()
	}
	if err := checkReplicaSettings(f.database, f.advertise, f.secret); err != nil {
		ln.Close()
		return err
	}
	if f.tokenFile != "" {
		if _, err := server.EnsureCredentials(ctx, st, f.tokenFile, ""); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "admin token is in %s\n", f.tokenFile)
	}
	bs, err := f.blobs.open(ctx, log)
	if err != nil {
		return err
	}
	policy, err := f.policy.guards(false, ownPorts(ln, opsLn), log)
	if err != nil {
		return err
	}
	signinCfg, err := f.signin.config(f.advertise, log)
	if err != nil {
		return err
	}
	srv, closeSrv, err := newServer(server.Config{ReplicaID: f.replicaID, AdvertiseURL: f.advertise, ClusterSecret: f.secret, Version: version, Coordinator: f.co,
		Automations: automationsDB(f.database, f.logLevel), SignIn: signinCfg},
		serverParts{store: st, blobs: bs, imageWork: f.imageWork, harnesses: &f.harnesses, keyFile: f.keyFile, createKey: !sharedDatabase(f.database),
			policy: policy, metrics: metrics.New(), log: log}, log)
	if err != nil {
		return err
	}
	defer closeSrv()
	if signinCfg.Issuer != "" {
		fmt.Fprintf(stderr, "dashboard: %s/ (sign in with %s)\n", signinCfg.BaseURL, signinCfg.Issuer)
	} else {
		fmt.Fprintf(stderr, "dashboard: %s/ (sign in with an API key: `engrams token create`)\n", f.advertise)
	}
	parts := []func(context.Context) error{
		func(ctx context.Context) error { return srv.Run(ctx, ln) },
		func(ctx context.Context) error { return serveOps(ctx, opsLn, srv.OpsHandler(), log) },
	}
	if bs != nil {
		parts = append(parts, func(ctx context.Context) error { return srv.Coordinator().RunGC(ctx, bs, coordinator.GCConfig{}) })
	}
	return runBoth(ctx, parts...)
}

// serverParts is what a replica runs on besides its settings.
type serverParts struct {
	store     store.Store
	blobs     blob.Store // nil: images and harnesses cannot be built
	imageWork string
	harnesses *harnessFlags
	keyFile   string
	createKey bool // create the secrets key file when missing (SQLite)
	policy    addrPolicy
	metrics   *metrics.Registry
	ready     []metrics.Check // besides the database's
	log       *slog.Logger    // the server's
}

// newServer opens the image materializer, the harness builder and the
// secrets key and makes a replica with them; closeAll releases them.
func newServer(cfg server.Config, p serverParts, log *slog.Logger) (srv *server.Server, closeAll func(), err error) {
	images, closeImages, err := imageMaterializer(p.blobs, p.imageWork, p.policy.registries, log.With("component", "images"))
	if err != nil {
		return nil, nil, err
	}
	hb, hc, closeHarnesses, err := p.harnesses.open(p.blobs, &cfg.Harnesses, log.With("component", "harnesses"))
	if err != nil {
		closeImages()
		return nil, nil, err
	}
	closeAll = func() { closeHarnesses(); closeImages() }
	sealer, err := secretsKey(p.keyFile, p.createKey)
	if err == nil {
		srv, err = server.New(cfg, server.Deps{Store: p.store, Logger: p.log, Images: images, Secrets: sealer, HarnessBuilder: hb, HarnessChunks: hc,
			Registries: p.policy.registries, Models: p.policy.models, GitHosts: p.policy.gitHosts, GitHubUpstream: p.policy.gitHosts.HTTPTransport(),
			IntegrationHosts: p.policy.integrations, Metrics: p.metrics, Ready: p.ready})
	}
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return srv, closeAll, nil
}

// sharedDatabase reports whether database is a Postgres URL, which
// replicas share.
func sharedDatabase(database string) bool {
	return strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
}

// minClusterSecret is the shortest --cluster-secret accepted: replicas
// trust any peer presenting it.
const minClusterSecret = 32

// checkClusterSecret refuses a cluster secret too short to resist
// guessing ("" is no secret: replicas on SQLite need none).
func checkClusterSecret(secret string) error {
	if secret != "" && len(secret) < minClusterSecret {
		return fmt.Errorf("--cluster-secret is %d characters; use at least %d (e.g. `openssl rand -hex 32`)", len(secret), minClusterSecret)
	}
	return nil
}

// checkReplicaSettings refuses settings with which replicas on a shared
// database could not reach each other's hosts.
func checkReplicaSettings(database, advertise, secret string) error {
	if !sharedDatabase(database) {
		return nil
	}
	u, err := url.Parse(advertise)
	if err != nil || u.Hostname() == "" {
		return fmt.Errorf("--advertise-url %q is not a URL other replicas can reach", advertise)
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		return fmt.Errorf("--advertise-url %s names no reachable address (listening on all interfaces): set --advertise-url to this replica's address", advertise)
	}
	if secret == "" {
		return errors.New("--cluster-secret is required with a shared database: every replica needs the same secret to forward host traffic")
	}
	return nil
}
