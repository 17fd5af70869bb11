package server

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/githubapp"
	"github.com/engrams/engrams/internal/hookapp"
	"github.com/engrams/engrams/internal/intake"
	"github.com/engrams/engrams/internal/integrations"
	"github.com/engrams/engrams/internal/linearapp"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/slackapp"
	"github.com/engrams/engrams/internal/tasks"
)

// assembleIntegrations builds the integrations, the runner that executes
// their blocks (when the config names its database) and the one delivery
// pipeline their receivers plug into. Adding an integration is its
// package and a line in each list below.
func (p *Parts) assembleIntegrations(cfg Config, deps Deps, log *slog.Logger) error {
	st := deps.Store
	hosts := deps.IntegrationHosts
	if hosts == nil {
		hosts = netpolicy.NewGuard(netpolicy.GuardConfig{})
	}
	// Outbound calls of every integration go through the address policy:
	// an api_url on loopback or a private address is dialled only when
	// the operator allowed it (--allow-integration-url).
	outbound := &http.Client{Transport: hosts.HTTPTransport(), Timeout: 30 * time.Second}
	var err error
	if p.Integrations, err = integrations.New(integrations.Deps{Store: st, Sealer: deps.Secrets, Hosts: hosts}); err != nil {
		return err
	}
	if p.Slack, err = slackapp.New(slackapp.Config{Owner: cfg.ReplicaID}, slackapp.Deps{Store: st, People: st, Settings: p.Integrations, Tasks: p.Tasks,
		HTTP: outbound, Logger: log.With("component", "slack")}); err != nil {
		return err
	}
	if p.GitHub, err = githubapp.New(githubapp.Deps{Settings: p.Integrations, People: st, Branches: tasks.NewPusher(p.Tasks), HTTP: outbound,
		Logger: log.With("component", "github")}); err != nil {
		return err
	}
	if p.Linear, err = linearapp.New(linearapp.Deps{Settings: p.Integrations, People: st, HTTP: outbound, Logger: log.With("component", "linear")}); err != nil {
		return err
	}
	if p.Hooks, err = hookapp.New(hookapp.Deps{Store: st, Sealer: sealerOf(deps)}); err != nil {
		return err
	}
	if err := p.openAutomations(cfg, deps, []connector.Blocks{p.Slack, p.GitHub, p.Linear}, log); err != nil {
		return err
	}
	ideps := intake.Deps{Receivers: []connector.Receiver{p.Hooks, p.Slack, p.GitHub, p.Linear}, Deliveries: st,
		Logger: log.With("component", "intake")}
	if p.Automations != nil {
		ideps.Runs = p.Automations
	}
	if p.Intake, err = intake.New(intake.Config{}, ideps); err != nil {
		return err
	}
	p.SlackSocket = slackapp.NewSocket(p.Slack, p.Intake)
	return nil
}

// sealerOf is the sealer of hook secrets (nil: none kept).
func sealerOf(deps Deps) hookapp.Sealer {
	if deps.Secrets == nil {
		return nil
	}
	return deps.Secrets
}

// openAutomations opens the automation runner when the config names its
// database; it executes the integrations' blocks.
func (p *Parts) openAutomations(cfg Config, deps Deps, ins []connector.Blocks, log *slog.Logger) error {
	ac := cfg.Automations
	if ac.SQLitePath == "" && ac.PostgresURL == "" {
		return nil
	}
	if ac.ExecutorID == "" {
		ac.ExecutorID = cfg.ReplicaID
	}
	var sealer autorun.Sealer
	if deps.Secrets != nil {
		sealer = deps.Secrets
	}
	// Connecting is bounded by DBOS (2 minutes).
	r, err := autorun.Open(context.Background(), ac, autorun.Deps{Store: deps.Store, Tasks: p.Tasks, TaskReads: deps.Store, Guests: p.Co, Sealer: sealer,
		Integrations: ins, Logger: log.With("component", "automations"), NewID: newID})
	if err != nil {
		return err
	}
	p.Automations = r
	return nil
}
