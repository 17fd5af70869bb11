package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/server"
)

func serverCmd() *cobra.Command {
	var (
		listen, advertise, database, replicaID, secret, tokenFile, logLevel string
		imageWork, keyFile                                                  string
		co                                                                  coordinator.Config
		blobs                                                               blobFlags
		harnesses                                                           harnessFlags
	)
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run a coordinator replica",
		Long: `Run one coordinator replica: the public API, the endpoint hosts dial, and
the lifecycle engine. Replicas are stateless: run several against one Postgres
database behind a load balancer, with the same --cluster-secret, each with an
--advertise-url the others can reach.

Every flag can also be set as ENGRAMS_<FLAG> (e.g. ENGRAMS_DATABASE).`,
		Example: `  engrams server --database postgres://engrams@db/engrams --listen :7700 \
    --advertise-url http://10.0.0.5:7700 --cluster-secret "$SECRET" \
    --bootstrap-token-file /var/lib/engrams/admin-token`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(os.Stderr, logLevel)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, err := openStore(ctx, database, log)
			if err != nil {
				return err
			}
			defer st.Close()
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			if advertise == "" {
				advertise = "http://" + ln.Addr().String()
			}
			if err := checkReplicaSettings(database, advertise, secret); err != nil {
				ln.Close()
				return err
			}
			if tokenFile != "" {
				if _, err := server.EnsureCredentials(ctx, st, tokenFile, ""); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "admin token is in %s\n", tokenFile)
			}
			bs, err := blobs.open(ctx, log)
			if err != nil {
				return err
			}
			images, closeImages, err := imageMaterializer(bs, imageWork, log.With("component", "images"))
			if err != nil {
				return err
			}
			defer closeImages()
			hb, hc, closeHarnesses, err := harnesses.open(bs, &co, log.With("component", "harnesses"))
			if err != nil {
				return err
			}
			defer closeHarnesses()
			shared := strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
			sealer, err := secrets(keyFile, !shared)
			if err != nil {
				return err
			}
			srv, err := server.New(server.Config{ReplicaID: replicaID, AdvertiseURL: advertise, ClusterSecret: secret, Version: version, Coordinator: co},
				server.Deps{Store: st, Logger: log, Images: images, Secrets: sealer, HarnessBuilder: hb, HarnessChunks: hc})
			if err != nil {
				return err
			}
			if bs == nil {
				return srv.Run(ctx, ln)
			}
			gc := func(ctx context.Context) error { return srv.Coordinator().RunGC(ctx, bs, coordinator.GCConfig{}) }
			return runBoth(ctx, func(ctx context.Context) error { return srv.Run(ctx, ln) }, gc)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", env("LISTEN", "127.0.0.1:7700"), "address to serve the API and host links on")
	f.StringVar(&advertise, "advertise-url", env("ADVERTISE_URL", ""), "URL other replicas use to reach this one (default http://<listen address>)")
	f.StringVar(&database, "database", env("DATABASE", ""), "postgres:// URL, or the path of an SQLite file")
	f.StringVar(&replicaID, "replica-id", env("REPLICA_ID", ""), "unique name of this replica (default: random)")
	f.StringVar(&secret, "cluster-secret", env("CLUSTER_SECRET", ""), "secret shared by replicas to forward host traffic")
	f.StringVar(&tokenFile, "bootstrap-token-file", env("BOOTSTRAP_TOKEN_FILE", ""), "mint an admin API token into this file (0600) unless the one there is valid")
	f.StringVar(&logLevel, "log-level", env("LOG_LEVEL", "info"), "debug, info, warn or error")
	f.DurationVar(&co.HostLostAfter, "host-lost-after", envDuration("HOST_LOST_AFTER", 0), "a host without heartbeats this long is lost (default 15s)")
	f.DurationVar(&co.IdleTimeout, "idle-timeout", envDuration("IDLE_TIMEOUT", 0), "suspend sessions idle this long (default 10m; per session: idle_timeout_s)")
	f.DurationVar(&co.MaxLifetime, "max-lifetime", envDuration("MAX_LIFETIME", 0), "end sessions dead this long after creation (default: no limit; per session: max_lifetime_s)")
	blobs.register(f, "")
	f.StringVar(&imageWork, "image-work-dir", env("IMAGE_WORK_DIR", filepath.Join(os.TempDir(), "engrams-images")), "scratch space for enabling images (an image's tree and root filesystem while it is built)")
	harnessWork := filepath.Join(os.TempDir(), "engrams-harnesses")
	harnesses.register(f, harnessWork, defaultHarnessCache(harnessWork))
	f.StringVar(&keyFile, "secrets-key-file", env("SECRETS_KEY_FILE", ""), "key sealing registry credentials at rest (engrams secrets-key create FILE; with SQLite it is created on first use); without it images cannot be enabled with credentials. Every replica needs the same file")
	f.DurationVar(&co.HeartbeatInterval, "heartbeat-interval", envDuration("HEARTBEAT_INTERVAL", 0), "how often hosts heartbeat (default 2s)")
	return cmd
}

// checkReplicaSettings refuses settings with which replicas on a shared
// database could not reach each other's hosts.
func checkReplicaSettings(database, advertise, secret string) error {
	shared := strings.HasPrefix(database, "postgres://") || strings.HasPrefix(database, "postgresql://")
	if !shared {
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
