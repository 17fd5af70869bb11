package host

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/engrams/engrams/internal/host/failure"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// MachineNetwork is one machine's network path, made before its VMM
// starts and removed with the machine. cmd wires it (Deps.Network): a
// vmnet.Net, the machine's own network namespace holding only its TAP,
// with the egress proxy and resolver of the session's policy listening in
// it (vmnet.Net.Listen on ProxyAddr, ListenPacket and Listen on
// ResolverAddr), the proxy learning each connection's destination from
// vmnet.OriginalDst.
type MachineNetwork interface {
	// TapFile is the TAP device the VMM inherits as the guest's NIC (nil
	// for a path that only sets proxy variables: see proxyEnv).
	TapFile() *os.File
	// Close stops what listens in the namespace and removes it.
	Close() error
}

// NetworkFunc makes a fresh network path for one boot or restore of sid's
// machine (a restore never reuses the one its snapshot's machine had, so
// a session never inherits another's policy, nor its own older one), its
// queries and connections recorded into deps.Events, which the path runs
// (EgressSink.Run) until it is closed. (nil, nil): the machine gets none,
// and its guest reaches nothing.
type NetworkFunc func(ctx context.Context, sid string, spec hostlink.MachineSpec, deps NetworkDeps) (MachineNetwork, error)

// NetworkDeps are what the agent gives one machine's network path.
type NetworkDeps struct {
	// Rejoin, when set, is the TAP of a machine this agent recovered
	// running: the path takes back the namespace behind it (its rules
	// stay; the listeners went with the previous agent) instead of making
	// a new one, and serves spec's policy there again.
	Rejoin *RunningTap
	Events EgressSink
	// DialBroker opens a connection to the coordinator's credential
	// broker for one of spec.Brokered ("name:port"), over the agent's
	// current link, fenced by the session's epoch.
	DialBroker func(ctx context.Context, hostPort string) (net.Conn, error)
}

// RunningTap is a running VMM's TAP: process PID holds it as its fd FD
// (vmm.Info.TapFD).
type RunningTap struct{ PID, FD int }

// EgressSink takes one machine's egress events for the coordinator and
// posts them while Run runs (relay.EgressReporter).
type EgressSink interface {
	Record(e hostlink.EgressEvent)
	Lost(n int64)
	Run(ctx context.Context) error
}

// attachNetwork makes sid's network path, if Deps.Network gives one, and
// sets it in vspec. The caller closes it if the VMM does not start.
func (l *lifecycle) attachNetwork(ctx context.Context, sid string, spec hostlink.MachineSpec, vspec *vmm.Spec) (MachineNetwork, error) {
	if l.network == nil {
		return nil, nil
	}
	n, err := l.network(ctx, sid, spec, l.networkDeps(sid, nil))
	if err != nil {
		return nil, failure.New(http.StatusInternalServerError, "network_failed", fmt.Errorf("make the network of session %s: %w", sid, err))
	}
	if n == nil {
		return nil, nil
	}
	if tap := n.TapFile(); tap != nil {
		vspec.Network = &vmm.Network{Tap: tap}
	}
	if pe, ok := n.(proxyEnv); ok {
		env := maps.Clone(vspec.Env)
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range pe.ProxyEnv() {
			if _, set := env[k]; !set { // the session's own settings win
				env[k] = v
			}
		}
		vspec.Env = env
	}
	return n, nil
}

func (l *lifecycle) networkDeps(sid string, rejoin *RunningTap) NetworkDeps {
	deps := NetworkDeps{Rejoin: rejoin, Events: l.hooks.EgressReporter(sid)}
	if l.dialBroker != nil {
		deps.DialBroker = func(ctx context.Context, hostPort string) (net.Conn, error) { return l.dialBroker(ctx, sid, hostPort) }
	}
	return deps
}

// rejoinNetwork gives a machine recovered running (m) its network path
// back: the egress proxy and resolver of spec's policy, listening again
// in the namespace its VMM's TAP is in. m is returned as it is when it has
// no TAP, and also when the path cannot be rejoined: its guest then
// reaches nothing (the rules drop or redirect to nothing), which is
// logged.
func (l *lifecycle) rejoinNetwork(ctx context.Context, log *slog.Logger, sid string, spec hostlink.MachineSpec, m vmm.Machine) vmm.Machine {
	info := m.Info()
	if l.network == nil || info.TapFD <= 0 {
		return m
	}
	n, err := l.network(ctx, sid, spec, l.networkDeps(sid, &RunningTap{PID: info.PID, FD: info.TapFD}))
	if err != nil {
		log.Error("recovered machine's network not rejoined; its guest reaches nothing", "err", err)
		return m
	}
	return withNetwork(m, n)
}

// proxyEnv is a network path without a TAP (the process backend's): its
// guest is told where the egress proxy is, in these variables.
type proxyEnv interface {
	ProxyEnv() map[string]string
}

// withNetwork ties n to m: destroying the machine (on any path: a
// destroy command, reconciliation, a snapshot's eviction) also removes
// its network. n may be nil.
func withNetwork(m vmm.Machine, n MachineNetwork) vmm.Machine {
	if n == nil {
		return m
	}
	return &networked{Machine: m, net: n}
}

type networked struct {
	vmm.Machine
	net  MachineNetwork
	once sync.Once
}

// Destroy destroys the machine, then its network (also when the destroy
// failed: the guest's NIC then has nothing behind it).
func (n *networked) Destroy(ctx context.Context) error {
	err := n.Machine.Destroy(ctx)
	n.once.Do(func() { _ = n.net.Close() })
	return err
}

func closeNetwork(n MachineNetwork) {
	if n != nil {
		_ = n.Close()
	}
}
