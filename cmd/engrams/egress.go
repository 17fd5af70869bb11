package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/host/egressnet"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmnet"
	"github.com/spf13/pflag"
)

// egressNetwork is a host's Deps.Network: a machine whose spec lists
// egress gets its own network namespace with a filtering resolver and
// proxy of that list (egressnet); on the process backend, which has no
// TAP, a proxy on the host's loopback its tools are pointed at (enforcing
// nothing); nil when neither can be had (said in the log: such a host's
// guests have no network at all). The guard refuses the host's own
// addresses and the coordinator's and agent's ports; allow are the
// operator's --egress-allow overrides. What the paths refuse and drop is
// counted in reg.
func egressNetwork(caps vmm.Capabilities, coordinatorURL string, ownAddrs []string, ef egressFlags, reg *metrics.Registry, log *slog.Logger) (host.NetworkFunc, error) {
	proxyOnly := caps.Name == apiv1.BackendProcess
	if !caps.Network && !proxyOnly {
		log.Info("guests get no network: the backend cannot attach one", "backend", caps.Name)
		return nil, nil
	}
	if err := vmnet.Available(); err != nil && !proxyOnly {
		log.Warn("guests get no network: this host cannot make network namespaces", "err", err)
		return nil, nil
	}
	paths, err := egressPaths(coordinatorURL, ownAddrs, ef, reg, log)
	if err != nil {
		return nil, err
	}
	if proxyOnly {
		log.Warn("process backend: guests share this host's network; HTTP_PROXY points their tools at an egress proxy of their allowlist, which enforces nothing")
		return func(ctx context.Context, sid string, spec hostlink.MachineSpec, deps host.NetworkDeps) (host.MachineNetwork, error) {
			p, err := paths.MakeProxyOnly(ctx, sid, egressnet.Machine{Allow: spec.Egress, Sink: deps.Events})
			if p == nil || err != nil {
				return nil, err // never a typed nil in the interface
			}
			return p, nil
		}, nil
	}
	return func(ctx context.Context, sid string, spec hostlink.MachineSpec, deps host.NetworkDeps) (host.MachineNetwork, error) {
		m := egressnet.Machine{Allow: spec.Egress, Brokered: spec.Brokered, Sink: deps.Events, DialBroker: deps.DialBroker}
		if deps.Rejoin != nil {
			m.RejoinPID, m.RejoinFD = deps.Rejoin.PID, deps.Rejoin.FD
		}
		p, err := paths.Make(ctx, sid, m)
		if p == nil || err != nil {
			return nil, err // never a typed nil in the interface
		}
		return p, nil
	}, nil
}

// egressPaths builds the machines' egress paths from the operator's flags.
func egressPaths(coordinatorURL string, ownAddrs []string, ef egressFlags, reg *metrics.Registry, log *slog.Logger) (*egressnet.Paths, error) {
	allows, err := netpolicy.ParseAllowances(ef.allow)
	if err != nil {
		return nil, fmt.Errorf("--egress-allow: %w", err)
	}
	cfg := egressnet.Config{Guard: netpolicy.GuardConfig{Allow: allows, Blocked: hostPrefixes(log), BlockedPorts: egressBlockedPorts(coordinatorURL, ownAddrs)}}
	if ef.dns != "" {
		if _, _, err := net.SplitHostPort(ef.dns); err != nil {
			return nil, fmt.Errorf("--egress-dns %q: want HOST:PORT", ef.dns)
		}
		r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ef.dns)
		}}
		cfg.Upstream, cfg.Guard.Resolver = r, r
	}
	return egressnet.New(cfg, egressnet.Deps{Logger: log.With("component", "egress"), Metrics: reg}), nil
}

// egressFlags are the operator's settings of guests' egress.
type egressFlags struct {
	allow []string // --egress-allow
	dns   string   // --egress-dns
}

func (ef *egressFlags) register(f *pflag.FlagSet) {
	f.StringArrayVar(&ef.allow, "egress-allow", nil, "`HOST[:PORT]` or CIDR[:PORT] that guests' egress may reach although it is private or loopback, for a name a session's allowlist names (repeatable; e.g. a package mirror on 10.0.0.5); the host's own addresses and the coordinator's port stay refused")
	f.StringVar(&ef.dns, "egress-dns", env("EGRESS_DNS", ""), "`HOST:PORT` of the DNS server that resolves the names guests may reach (default: this machine's resolver)")
}

// hostPrefixes are this host's own addresses, each as a single-address
// prefix.
func hostPrefixes(log *slog.Logger) []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		log.Warn("list this host's addresses for the egress guard", "err", err)
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, netip.PrefixFrom(p.Addr().Unmap(), p.Addr().Unmap().BitLen()))
		}
	}
	return out
}

// egressBlockedPorts are the ports of the coordinator's URL and of the agent's own
// listeners (host:port addresses).
func egressBlockedPorts(coordinatorURL string, listeners []string) []uint16 {
	var out []uint16
	add := func(s string) {
		if n, err := strconv.ParseUint(s, 10, 16); err == nil && n > 0 {
			out = append(out, uint16(n))
		}
	}
	if u, err := url.Parse(coordinatorURL); err == nil {
		switch {
		case u.Port() != "":
			add(u.Port())
		case u.Scheme == "https":
			add("443")
		default:
			add("80")
		}
	}
	for _, l := range listeners {
		if _, p, err := net.SplitHostPort(l); err == nil {
			add(p)
		}
	}
	return out
}
