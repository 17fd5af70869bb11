package server

import (
	"log/slog"
	"net/http"

	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/broker"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/egresslog"
	"github.com/engrams/engrams/internal/gateway"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/githubapp"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/hookapp"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/intake"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/linearapp"
	"github.com/engrams/engrams/internal/profiles"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/slackapp"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/tasks"
)

// Parts are one replica's services, wired to each other through the small
// interfaces each declares.
type Parts struct {
	Co        *coordinator.Coordinator
	Images    *imagejobs.Images
	Harnesses *harnessreg.Registry
	Vault     *secrets.Vault
	Profiles  *profiles.Profiles
	Gateway   *gateway.Gateway
	Tasks     *tasks.Tasks
	Egress    *egresslog.Log
	Broker    *broker.Broker
	// Automations runs automations; nil when the config names no
	// database for them (Assemble in API tests).
	Automations *autorun.Runner
	// Integrations configures Slack, GitHub and Linear; each of them and
	// signed webhooks plug into the integration seam (connector): Intake
	// takes their deliveries, the runner executes their blocks.
	Integrations *integrations.Service
	Slack        *slackapp.App
	SlackSocket  *slackapp.Socket
	GitHub       *githubapp.App
	Linear       *linearapp.App
	Hooks        *hookapp.Receiver
	Intake       *intake.Pipeline
}

// The services satisfy the interfaces of the parts that consume them.
var (
	_ coordinator.Images          = (*imagejobs.Images)(nil)
	_ coordinator.Harnesses       = (*harnessreg.Registry)(nil)
	_ coordinator.ChunkRoots      = (*imagejobs.Images)(nil)
	_ coordinator.ChunkRoots      = (*harnessreg.Registry)(nil)
	_ coordinator.RestoreObserver = tasks.Rewinder{}
	_ imagejobs.Placer            = (*coordinator.Placement)(nil)
	_ coordinator.Links           = (*hostlink.Router)(nil)
	_ tasks.Sessions              = (*coordinator.Coordinator)(nil)
	_ tasks.Profiles              = (*profiles.Profiles)(nil)
	_ tasks.Placeholders          = (*gateway.Gateway)(nil)
	_ tasks.Secrets               = (*secrets.Vault)(nil)
	_ tasks.AppTokens             = (*ghapp.Minter)(nil)
	_ profiles.Images             = (*imagejobs.Images)(nil)
	_ gateway.Secrets             = (*secrets.Vault)(nil)
	_ tasks.Brokers               = (*broker.Broker)(nil)
	_ broker.Events               = (*egresslog.Log)(nil)
	_ broker.AppTokens            = (*ghapp.Minter)(nil)
	_ slackapp.Tasks              = (*tasks.Tasks)(nil)
	_ githubapp.Branches          = (*tasks.Pusher)(nil)
	_ connector.Settings          = (*integrations.Service)(nil)
	_ intake.Runs                 = (*autorun.Runner)(nil)
	_ slackapp.Deliverer          = (*intake.Pipeline)(nil)
	_ api.Intake                  = (*intake.Pipeline)(nil)
)

// Assemble builds the services of a replica that reaches hosts through t
// (New does; tests of the API use it to get the real services).
func Assemble(cfg Config, deps Deps, t hostlink.Transports, log *slog.Logger) (*Parts, error) {
	return assemble(cfg, deps, t, nil, log)
}

// assemble is Assemble with the replica's host links (nil: none).
func assemble(cfg Config, deps Deps, t hostlink.Transports, links coordinator.Links, log *slog.Logger) (*Parts, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Parts{}
	var err error
	st := deps.Store
	if p.Harnesses, err = harnessreg.New(cfg.Harnesses, harnessreg.Deps{Store: st, Builder: deps.HarnessBuilder, Chunks: deps.HarnessChunks, Logger: log}); err != nil {
		return p, err
	}
	cc := cfg.Coordinator
	cc.ReplicaID, cc.ReplicaAddr = cfg.ReplicaID, cfg.AdvertiseURL
	p.Images, err = imagejobs.New(imagejobs.Config{DefaultVCPUs: cc.DefaultVCPUs, MaxMemoryMiB: cc.MaxMemoryMiB, MaxVCPUs: cc.MaxVCPUs,
		PlacementWait: cc.PlacementWait}, imagejobs.Deps{Store: st, Hosts: t, Place: coordinator.NewPlacement(st, cc.HeartbeatInterval, nil),
		Images: deps.Images, Secrets: deps.Secrets, Registries: deps.Registries, Logger: log})
	if err != nil {
		return p, err
	}
	p.Co, err = coordinator.New(cc, coordinator.Deps{Store: st, Hosts: t, Links: links, Logger: log, Images: p.Images, Harnesses: p.Harnesses,
		Roots: []coordinator.ChunkRoots{p.Images, p.Harnesses}, Restored: []coordinator.RestoreObserver{tasks.Rewinder{Store: st}},
		Metrics: deps.Metrics})
	if err != nil {
		return p, err
	}
	if p.Vault, err = secrets.New(secrets.Deps{Store: st, Sealer: deps.Secrets, Logger: log}); err != nil {
		return p, err
	}
	if p.Profiles, err = profiles.New(profiles.Deps{Store: st, Images: p.Images, Logger: log}); err != nil {
		return p, err
	}
	if p.Gateway, err = gateway.New(cfg.Gateway, gateway.Deps{Store: st, Secrets: p.Vault, Sealer: deps.Secrets, Providers: deps.Models, Logger: log}); err != nil {
		return p, err
	}
	if p.Egress, err = egresslog.New(cfg.Egress, egresslog.Deps{Store: st, Metrics: deps.Metrics, Logger: log}); err != nil {
		return p, err
	}
	tc := cfg.Tasks
	if tc.MonitorInterval == 0 {
		tc.MonitorInterval = p.Co.Config().MonitorInterval
	}
	appTokens := ghapp.New(ghapp.Config{}, ghapp.Deps{HTTP: &http.Client{Transport: deps.GitHubUpstream}, Logger: log})
	if p.Broker, err = broker.New(cfg.Broker, broker.Deps{Store: st, Secrets: p.Vault, Sealer: deps.Secrets, AppTokens: appTokens,
		Events: p.Egress, Upstream: deps.GitHosts, RootCAs: deps.BrokerRootCAs, Logger: log}); err != nil {
		return p, err
	}
	p.Tasks, err = tasks.New(tc, tasks.Deps{Store: st, Sessions: p.Co, Profiles: p.Profiles, Placeholders: p.Gateway, Secrets: p.Vault,
		AppTokens: appTokens, Brokers: p.Broker, Logger: log, Metrics: deps.Metrics})
	if err != nil {
		return p, err
	}
	return p, p.assembleIntegrations(cfg, deps, log)
}

// routeHostLink adds what hosts send over their link to mux: each part's
// host-link routes.
func (p *Parts) routeHostLink(mux *http.ServeMux) {
	p.Co.RouteHostLink(mux)
	p.Gateway.RouteHostLink(mux)
	p.Tasks.RouteHostLink(mux)
	p.Egress.RouteHostLink(mux)
	p.Broker.RouteHostLink(mux)
}

// APIDeps gives each API router its service (st is the replica's store,
// which the read-only routers use).
func (p *Parts) APIDeps(st store.Store, log *slog.Logger) api.Deps {
	d := api.Deps{Sessions: p.Co, Reads: st, Guests: p.Co, Fleet: st, Access: st, Identities: st, HostAdmin: p.Co.Access(), Images: p.Images, Harnesses: p.Harnesses,
		Secrets: p.Vault, Profiles: p.Profiles, Tasks: p.Tasks, TaskReads: st, Grants: st, Egress: p.Egress, Idempotency: st, Changes: st, Logger: log, NewID: newID}
	d.Integrations, d.TaskPRs = p.Integrations, p.GitHub
	if p.Automations != nil {
		d.Automations, d.Runs, d.Builtins, d.Intake = p.Automations, p.Automations, p.Automations, p.Intake
	}
	return d
}
