package server

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	apidoc "github.com/engrams/engrams/api"
	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/broker"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/dashboard"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egresslog"
	"github.com/engrams/engrams/internal/gateway"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/signin"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/tasks"
)

// Config is one replica's configuration.
type Config struct {
	ReplicaID     string // default: a fresh UUID
	AdvertiseURL  string // how peers reach this replica; default derived from the listener
	ClusterSecret string // shared by replicas for forwarded host traffic
	Version       string
	Coordinator   coordinator.Config // ReplicaID and ReplicaAddr are filled in
	Dashboard     dashboard.Config
	SignIn        signin.Config // the identity provider (none: login links and keys)
	Harnesses     harnessreg.Config
	Gateway       gateway.Config
	// BodyWindow and BodyMinBytes are the slowest a request body may
	// come: at least BodyMinBytes in every BodyWindow, or it is cut
	// (bodyrate.go; defaults 30s and 16 KiB).
	BodyWindow   time.Duration
	BodyMinBytes int64
	Tasks        tasks.Config // MonitorInterval defaults to the coordinator's
	Egress       egresslog.Config
	Broker       broker.Config
	// Automations says where automation runs are kept: the store's own
	// database (cmd/ sets SQLitePath or PostgresURL from it; neither: this
	// replica runs no automations). ExecutorID defaults to the ReplicaID;
	// a replica that keeps one across restarts (dev) resumes its runs at
	// once instead of after another replica finds it stale.
	Automations autorun.Config
}

// Deps are what cmd/ chose.
type Deps struct {
	Store  store.Store
	Logger *slog.Logger
	// Images materializes enabled images (nil: image jobs fail, saying
	// the server has no blob store); Secrets seals registry credentials
	// and users' secrets (nil: storing them is refused).
	Images  imagejobs.Materializer
	Secrets secrets.Sealer
	// HarnessBuilder and HarnessChunks build harness bundles and store
	// their chunks (nil: harness build and add are refused).
	HarnessBuilder harnessreg.HarnessBuilder
	HarnessChunks  harnessreg.ChunkPutter
	// GitHubUpstream carries GitHub App token requests (cmd/: through the
	// git hosts' Guard, so a GitHub Enterprise base URL at a private
	// address needs --allow-git-host; nil: TLS verified
	// with the system roots).
	GitHubUpstream http.RoundTripper
	// Registries and Models are the address policy of what the replica
	// dials itself: image registries (checked at image enable; the
	// materializer in Images dials through its own, which cmd/ builds
	// from the same allowances) and model providers (the gateway dials
	// through it). A *netpolicy.Guard is both; nil: one allowing no
	// loopback or private address.
	Registries imagejobs.Registries
	Models     gateway.Providers
	// GitHosts is how the credential broker reaches repositories' git
	// hosts (a *netpolicy.Guard; nil: one allowing no loopback or private
	// address); BrokerRootCAs verify them (nil: the system roots).
	GitHosts      broker.Dialer
	BrokerRootCAs *x509.CertPool
	// IntegrationHosts is the address policy of what integrations dial
	// (Slack, GitHub, Linear at their api_url): a *netpolicy.Guard; nil:
	// one allowing no loopback or private address.
	IntegrationHosts *netpolicy.Guard
	// Metrics is the process's registry (nil: nothing is measured and no
	// /metrics is served); Ready are readiness checks besides the
	// database's (dev: its host agent's link).
	Metrics *metrics.Registry
	Ready   []metrics.Check
}

// Server is a coordinator replica.
type Server struct {
	cfg    Config
	st     store.Store
	log    *slog.Logger
	parts  *Parts
	link   *hostlink.Server
	router *hostlink.Router
	api    *api.Server
	dash   *dashboard.Dashboard
	signin *signin.Service
	mux    *http.ServeMux
	met    *metrics.Registry
	ready  []metrics.Check
}

// New assembles a replica. The advertise URL must be known here, so callers
// that listen on port 0 pass the listener's address in cfg.AdvertiseURL.
func New(cfg Config, deps Deps) (*Server, error) {
	if deps.Store == nil {
		return nil, errors.New("server: a store is required")
	}
	if cfg.ReplicaID == "" {
		cfg.ReplicaID = uuid.NewString()
	}
	if cfg.AdvertiseURL == "" {
		return nil, errors.New("server: AdvertiseURL is required (how other replicas reach this one)")
	}
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, st: deps.Store, log: log, mux: http.NewServeMux(), met: deps.Metrics, ready: deps.Ready}
	if err := deps.Metrics.Register(newSessionStates(deps.Store.CountSessionsByState, log)); err != nil {
		return nil, fmt.Errorf("server: register sessions by state: %w", err)
	}
	links := &linkCount{met: deps.Metrics, hosts: map[domain.HostID]bool{}}
	hostMux := http.NewServeMux()
	s.link = hostlink.NewServer(hostlink.ServerConfig{}, hostlink.ServerDeps{
		Authenticate: func(ctx context.Context, tok string) (hostlink.Credential, error) {
			return s.parts.Co.Access().AuthenticateHost(ctx, tok)
		},
		Admit:        func(ctx context.Context, l hostlink.LinkInfo) error { return s.parts.Co.Access().AdmitLink(ctx, l) },
		Release:      func(ctx context.Context, l hostlink.LinkInfo) { s.parts.Co.Access().ReleaseLink(ctx, l) },
		Handler:      hostMux,
		OnConnect:    links.connected,
		OnDisconnect: links.disconnected,
		Logger:       log,
	})
	s.router = hostlink.NewRouter(hostlink.RouterConfig{ReplicaID: cfg.ReplicaID, ClusterSecret: cfg.ClusterSecret},
		hostlink.RouterDeps{Local: s.link, Lookup: s.lookupHost, Logger: log})
	p, err := assemble(cfg, deps, s.router, s.router, log)
	if err != nil {
		return nil, err
	}
	s.parts = p
	p.routeHostLink(hostMux)
	if s.signin, err = signin.New(cfg.SignIn, signin.Deps{Store: deps.Store, Logger: log.With("component", "signin"), NewID: newID}); err != nil {
		return nil, err
	}
	apiDeps := p.APIDeps(deps.Store, log)
	apiDeps.SignIn = s.signin
	s.api = api.New(api.Config{Version: cfg.Version, ReplicaID: cfg.ReplicaID, OpenAPI: apidoc.OpenAPI()}, apiDeps)
	s.mux.Handle(apiv1.PathPrefix, s.api)
	if s.dash, err = dashboard.New(cfg.Dashboard, dashboard.Deps{SignIn: s.signInOwner, Logger: log.With("component", "dashboard")}); err != nil {
		return nil, err
	}
	s.dash.Route(s.mux)
	s.mux.Handle(hostlink.PathConnect, s.link)
	s.mux.Handle(hostlink.PathPeerPrefix, s.router.PeerHandler())
	s.met.Mount(s.mux, s.checks()...)
	return s, nil
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func (s *Server) lookupHost(ctx context.Context, hostID domain.HostID) (string, string, error) {
	h, err := s.st.GetHost(ctx, hostID)
	if err != nil {
		return "", "", err
	}
	return h.ReplicaID, h.ReplicaAddr, nil
}

// Dashboard is the web app this replica serves at / (dev prints its login
// link).
func (s *Server) Dashboard() *dashboard.Dashboard { return s.dash }

// signInOwner signs a browser in as the first owner: a login link's
// sign-in (the person `engrams dev` made).
func (s *Server) signInOwner(w http.ResponseWriter, r *http.Request) (apiv1.SignedIn, error) {
	m, err := s.st.GetMember(r.Context(), domain.FirstOrg, domain.FirstOwner)
	if err != nil {
		return apiv1.SignedIn{}, fmt.Errorf("sign in with a login link: the first owner: %w", err)
	}
	return s.signin.Begin(r.Context(), w, r, m, "link")
}

// Coordinator exposes the lifecycle engine (tests and dev use it).
func (s *Server) Coordinator() *coordinator.Coordinator { return s.parts.Co }

// Run serves on ln and runs the coordinator loops until ctx ends, then shuts
// down and joins everything. Long requests (event streams, waits) see their
// context cancelled at shutdown, and connections still open after a grace
// period are closed.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	window, min := s.cfg.BodyWindow, s.cfg.BodyMinBytes
	if window <= 0 {
		window = defaultBodyWindow
	}
	if min <= 0 {
		min = defaultBodyMinBytes
	}
	hs := &http.Server{
		Handler: limitBodyRate(s.mux, window, min), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	run := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	run(func() error { return s.parts.Co.Run(ctx) })
	run(func() error { return s.parts.Images.Run(ctx) })
	run(func() error { return s.parts.Tasks.Run(ctx) })
	run(func() error { return s.parts.Egress.Run(ctx) })
	if s.parts.Automations != nil {
		run(func() error { return s.parts.Automations.Run(ctx) })
	}
	run(func() error { return s.parts.Slack.Run(ctx) })
	run(func() error { return s.parts.SlackSocket.Run(ctx) })
	run(func() error { return s.link.Run(ctx) })
	run(func() error {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve %s: %w", ln.Addr(), err)
		}
		return nil
	})
	s.log.Info("coordinator replica serving", "addr", ln.Addr().String(), "replica_id", s.cfg.ReplicaID)
	<-ctx.Done()
	cancelReqs()
	shutCtx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer c2()
	if err := hs.Shutdown(shutCtx); err != nil {
		_ = hs.Close()
	}
	_ = s.link.Close() // hijacked host links end here
	_ = s.router.Close()
	wg.Wait()
	close(errs)
	return <-errs
}
