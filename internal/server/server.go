package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/google/uuid"

	apidoc "github.com/engrams/engrams/api"
	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store"
)

// Config is one replica's configuration.
type Config struct {
	ReplicaID     string // default: a fresh UUID
	AdvertiseURL  string // how peers reach this replica; default derived from the listener
	ClusterSecret string // shared by replicas for forwarded host traffic
	Version       string
	Coordinator   coordinator.Config // ReplicaID and ReplicaAddr are filled in
}

// Deps are what cmd/ chose.
type Deps struct {
	Store  store.Store
	Logger *slog.Logger
	// Images materializes enabled images (nil: image jobs fail, saying
	// the server has no blob store); Secrets seals registry credentials
	// (nil: enabling an image with credentials is refused).
	Images  coordinator.Materializer
	Secrets coordinator.Sealer
	// HarnessBuilder and HarnessChunks build harness bundles and store
	// their chunks (nil: harness build and add are refused).
	HarnessBuilder coordinator.HarnessBuilder
	HarnessChunks  coordinator.ChunkPutter
}

// Server is a coordinator replica.
type Server struct {
	cfg    Config
	st     store.Store
	log    *slog.Logger
	co     *coordinator.Coordinator
	link   *hostlink.Server
	router *hostlink.Router
	api    *api.Server
	mux    *http.ServeMux
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
	s := &Server{cfg: cfg, st: deps.Store, log: log, mux: http.NewServeMux()}
	s.link = hostlink.NewServer(hostlink.ServerConfig{}, hostlink.ServerDeps{
		Authenticate: func(ctx context.Context, tok string) (string, error) { return s.co.AuthenticateHost(ctx, tok) },
		Handler:      http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.co.HostHandler().ServeHTTP(w, r) }),
		Logger:       log,
	})
	s.router = hostlink.NewRouter(hostlink.RouterConfig{ReplicaID: cfg.ReplicaID, ClusterSecret: cfg.ClusterSecret},
		hostlink.RouterDeps{Local: s.link, Lookup: s.lookupHost, Logger: log})
	cc := cfg.Coordinator
	cc.ReplicaID, cc.ReplicaAddr = cfg.ReplicaID, cfg.AdvertiseURL
	co, err := coordinator.New(cc, coordinator.Deps{Store: deps.Store, Hosts: s.router, Logger: log,
		Images: deps.Images, Secrets: deps.Secrets, HarnessBuilder: deps.HarnessBuilder, HarnessChunks: deps.HarnessChunks})
	if err != nil {
		return nil, err
	}
	s.co = co
	s.api = api.New(api.Config{Version: cfg.Version, ReplicaID: cfg.ReplicaID, OpenAPI: apidoc.OpenAPI()},
		api.Deps{Coordinator: co, Store: deps.Store, Logger: log, NewID: newID})
	s.mux.Handle("/v1/", s.api)
	s.mux.Handle(hostlink.PathConnect, s.link)
	s.mux.Handle("/internal/v1/hosts/", s.router.PeerHandler())
	return s, nil
}

func newID() string { return uuid.Must(uuid.NewV7()).String() }

func (s *Server) lookupHost(ctx context.Context, hostID string) (string, string, error) {
	h, err := s.st.GetHost(ctx, hostID)
	if err != nil {
		return "", "", fmt.Errorf("look up host %s: %w", hostID, err)
	}
	return h.ReplicaID, h.ReplicaAddr, nil
}

// Coordinator exposes the lifecycle engine (tests and dev use it).
func (s *Server) Coordinator() *coordinator.Coordinator { return s.co }

// Run serves on ln and runs the coordinator loops until ctx ends, then shuts
// down and joins everything. Long requests (event streams, waits) see their
// context cancelled at shutdown, and connections still open after a grace
// period are closed.
func (s *Server) Run(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqCtx, cancelReqs := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelReqs()
	hs := &http.Server{
		Handler: s.mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
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
	run(func() error { return s.co.Run(ctx) })
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
