package server

import (
	"log/slog"

	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/gateway"
	"github.com/engrams/engrams/internal/harnessreg"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/imagejobs"
	"github.com/engrams/engrams/internal/profiles"
	"github.com/engrams/engrams/internal/secrets"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/tasks"
)

// parts are one replica's services, wired to each other through the small
// interfaces each declares.
type parts struct {
	co        *coordinator.Coordinator
	images    *imagejobs.Images
	harnesses *harnessreg.Registry
	vault     *secrets.Vault
	profiles  *profiles.Profiles
	gateway   *gateway.Gateway
	tasks     *tasks.Tasks
}

// The services satisfy the interfaces of the parts that consume them.
var (
	_ coordinator.Images          = (*imagejobs.Images)(nil)
	_ coordinator.Harnesses       = (*harnessreg.Registry)(nil)
	_ coordinator.ChunkRoots      = (*imagejobs.Images)(nil)
	_ coordinator.ChunkRoots      = (*harnessreg.Registry)(nil)
	_ coordinator.RestoreObserver = tasks.Rewinder{}
	_ imagejobs.Placer            = (*coordinator.Placement)(nil)
	_ tasks.Sessions              = (*coordinator.Coordinator)(nil)
	_ tasks.Profiles              = (*profiles.Profiles)(nil)
	_ tasks.Placeholders          = (*gateway.Gateway)(nil)
	_ tasks.Secrets               = (*secrets.Vault)(nil)
	_ profiles.Images             = (*imagejobs.Images)(nil)
	_ gateway.Secrets             = (*secrets.Vault)(nil)
)

// assemble builds the services of a replica that reaches hosts through t.
func assemble(cfg Config, deps Deps, t hostlink.Transports, log *slog.Logger) (parts, error) {
	var p parts
	var err error
	st := deps.Store
	if p.harnesses, err = harnessreg.New(cfg.Harnesses, harnessreg.Deps{Store: st, Builder: deps.HarnessBuilder, Chunks: deps.HarnessChunks, Logger: log}); err != nil {
		return p, err
	}
	cc := cfg.Coordinator
	cc.ReplicaID, cc.ReplicaAddr = cfg.ReplicaID, cfg.AdvertiseURL
	p.images, err = imagejobs.New(imagejobs.Config{DefaultVCPUs: cc.DefaultVCPUs, MaxMemoryMiB: cc.MaxMemoryMiB, MaxVCPUs: cc.MaxVCPUs,
		PlacementWait: cc.PlacementWait}, imagejobs.Deps{Store: st, Hosts: t, Place: coordinator.NewPlacement(st, cc.HeartbeatInterval, nil),
		Images: deps.Images, Secrets: deps.Secrets, Logger: log})
	if err != nil {
		return p, err
	}
	p.co, err = coordinator.New(cc, coordinator.Deps{Store: st, Hosts: t, Logger: log, Images: p.images, Harnesses: p.harnesses,
		Roots: []coordinator.ChunkRoots{p.images, p.harnesses}, Restored: []coordinator.RestoreObserver{tasks.Rewinder{Store: st}}})
	if err != nil {
		return p, err
	}
	if p.vault, err = secrets.New(secrets.Deps{Store: st, Sealer: deps.Secrets, Logger: log}); err != nil {
		return p, err
	}
	if p.profiles, err = profiles.New(profiles.Deps{Store: st, Images: p.images, Logger: log}); err != nil {
		return p, err
	}
	if p.gateway, err = gateway.New(cfg.Gateway, gateway.Deps{Store: st, Secrets: p.vault, Sealer: deps.Secrets, Upstream: deps.GatewayUpstream, Logger: log}); err != nil {
		return p, err
	}
	p.tasks, err = tasks.New(tasks.Config{MonitorInterval: p.co.Config().MonitorInterval}, tasks.Deps{Store: st, Sessions: p.co,
		Profiles: p.profiles, Placeholders: p.gateway, Secrets: p.vault, Logger: log})
	return p, err
}

// apiDeps gives each API router its service.
func (p parts) apiDeps(st store.Store, log *slog.Logger) api.Deps {
	return api.Deps{Sessions: p.co, Reads: st, Guests: p.co, Fleet: st, Images: p.images, Harnesses: p.harnesses,
		Secrets: p.vault, Profiles: p.profiles, Tasks: p.tasks, TaskReads: st, Logger: log, NewID: newID}
}
