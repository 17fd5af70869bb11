package egressnet

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egress"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/netpolicy"
	"github.com/engrams/engrams/internal/vmm/vmnet"
)

// Config is what every machine's path shares.
type Config struct {
	// Guard is the address policy the proxy dials through and the resolver
	// judges answers with: the host's own addresses and the coordinator's
	// and agent's ports blocked, the operator's allowances.
	Guard netpolicy.GuardConfig
	// Upstream resolves allowed names for the resolver (nil:
	// net.DefaultResolver; the Guard resolves again when the proxy dials).
	Upstream egress.Upstream
	Proxy    egress.ProxyConfig
	DNS      egress.DNSConfig
	Events   egress.EventsConfig
}

// Deps are what every path logs and counts with.
type Deps struct {
	Logger  *slog.Logger   // nil: discarded
	Metrics egress.Metrics // nil: nothing counted
}

// Sink takes one machine's events for the coordinator and posts them
// while Run runs (relay.EgressReporter).
type Sink interface {
	Record(hostlink.EgressEvent)
	Lost(n int64)
	Run(ctx context.Context) error
}

// Paths makes the egress path of each machine.
type Paths struct {
	cfg   Config
	guard *netpolicy.Guard
	log   *slog.Logger
	met   egress.Metrics
}

// New returns Paths.
func New(cfg Config, deps Deps) *Paths {
	if cfg.Upstream == nil {
		cfg.Upstream = net.DefaultResolver
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	return &Paths{cfg: cfg, guard: netpolicy.NewGuard(cfg.Guard), log: deps.Logger, met: deps.Metrics}
}

// events is a machine's event queue in front of sink.
func (p *Paths) events(sink Sink) *egress.Events {
	return egress.NewEvents(p.cfg.Events, egress.EventsDeps{Sink: sinkAdapter{sink}, Metrics: p.met})
}

// Path is one machine's running egress path.
type Path struct {
	net    *vmnet.Net
	stages *stages
}

// Machine is what one machine's path serves.
type Machine struct {
	Allow []string // hostlink.MachineSpec.Egress; empty: no network at all
	// Brokered are the "name:port" entries whose TLS goes to the
	// coordinator's credential broker (hostlink.MachineSpec.Brokered).
	Brokered []string
	Sink     Sink
	// DialBroker opens a connection to the broker for "name:port"
	// (hostlink.DialBroker over the agent's link); nil: nothing is
	// brokered, and TLS to those hosts is refused.
	DialBroker func(ctx context.Context, hostPort string) (net.Conn, error)
	// RejoinPID > 0: the machine runs already (recovered by a restarted
	// agent); its path takes back the namespace of the TAP that VMM
	// process holds as its fd RejoinFD (vmnet.Rejoin) instead of making
	// one.
	RejoinPID, RejoinFD int
}

// Make builds the path of one boot or restore of sid's machine (or
// rebuilds it for one recovered running: m.RejoinPID); nil, nil when
// m.Allow is empty (the machine gets no network at all). Close removes
// it.
func (p *Paths) Make(ctx context.Context, sid string, m Machine) (*Path, error) {
	if len(m.Allow) == 0 {
		return nil, nil
	}
	policy, err := netpolicy.Compile(m.Allow)
	if err != nil {
		return nil, fmt.Errorf("compile the egress policy of session %s: %w", sid, err)
	}
	b, err := newBrokered(m.Brokered, m.DialBroker)
	if err != nil {
		return nil, fmt.Errorf("the brokered hosts of session %s: %w", sid, err)
	}
	var n *vmnet.Net
	if m.RejoinPID > 0 {
		n, err = vmnet.Rejoin(ctx, vmnet.Config{}, m.RejoinPID, m.RejoinFD)
	} else {
		n, err = vmnet.New(ctx, vmnet.Config{})
	}
	if err != nil {
		return nil, fmt.Errorf("make the network of session %s: %w", sid, err)
	}
	pa := &Path{net: n}
	if err := p.start(pa, sid, policy, b, m.Sink); err != nil {
		_ = n.Close()
		return nil, err
	}
	return pa, nil
}

func (p *Paths) start(pa *Path, sid string, policy *netpolicy.Policy, b *brokered, sink Sink) error {
	n := pa.net
	proxyLn, err := n.Listen("tcp", n.ProxyAddr().String())
	if err != nil {
		return fmt.Errorf("egress proxy of session %s: %w", sid, err)
	}
	udp, err := n.ListenPacket("udp", n.ResolverAddr().String())
	if err != nil {
		return fmt.Errorf("egress resolver of session %s: %w", sid, err)
	}
	tcp, err := n.Listen("tcp", n.ResolverAddr().String())
	if err != nil {
		return fmt.Errorf("egress resolver of session %s: %w", sid, err)
	}
	log := p.log.With("session_id", sid)
	events := p.events(sink)
	dnsCfg := p.cfg.DNS
	dnsCfg.IPv4Only = true // vmnet gives the guest no IPv6
	dns, err := egress.NewDNS(dnsCfg, egress.DNSDeps{UDP: udp, TCP: tcp, Names: policy, Upstream: b.upstream(p.cfg.Upstream),
		Addrs: b.addrs(answerCheck{guard: p.guard, ports: policyPorts(policy)}), Present: present, Events: events, Logger: log})
	if err != nil {
		return fmt.Errorf("egress resolver of session %s: %w", sid, err)
	}
	proxyCfg := p.cfg.Proxy
	proxyCfg.PlaceholderPrefix = domain.PlaceholderPrefix
	proxy, err := egress.NewProxy(proxyCfg, egress.ProxyDeps{Listener: proxyLn, Names: policy, Dialer: p.guard,
		OriginalDst: vmnet.OriginalDst, Broker: b.broker(), Events: events, Logger: log})
	if err != nil {
		return fmt.Errorf("egress proxy of session %s: %w", sid, err)
	}
	servers := []func(context.Context) error{dns.Run, proxy.Run}
	if dl, err := n.Drops(); err != nil {
		log.Warn("the packets this machine's network drops go unrecorded", "err", err)
	} else {
		rec := newDropRecorder(events)
		servers = append(servers, func(ctx context.Context) error { return runDrops(ctx, dl, rec) })
	}
	pa.stages = startStages(log, servers, events, sink)
	return nil
}

// TapFile is the guest's NIC for the VMM (host.MachineNetwork).
func (pa *Path) TapFile() *os.File { return pa.net.TapFile() }

// Close stops the resolver and proxy, posts their last events and removes
// the namespace.
func (pa *Path) Close() error {
	return pa.stages.stop(pa.net.Close) // closing the namespace closes the listeners the servers serve
}

// sinkAdapter maps egress events to the host link's.
type sinkAdapter struct{ s Sink }

func (a sinkAdapter) Record(_ context.Context, ev egress.Event) {
	if ev.Kind == egress.KindDropped {
		a.s.Lost(ev.Dropped)
		return
	}
	a.s.Record(hostlink.EgressEvent{At: ev.Time, Kind: string(ev.Kind), Proto: ev.Proto, Addr: ev.Addr, Host: ev.Host, Port: ev.Port,
		Verdict: string(ev.Verdict), BytesUp: ev.BytesUp, BytesDown: ev.BytesDown, Reason: ev.Reason})
}

// answerCheck judges an address the resolver would answer: it is kept if
// the guard lets it be dialled on any port the session's policy names (the
// proxy checks it again, on the port dialled, before it connects), so an
// operator's allowance of one private address and port answers too.
type answerCheck struct {
	guard *netpolicy.Guard
	ports []uint16
}

func (a answerCheck) CheckAddr(ap netip.AddrPort) error {
	err := a.guard.CheckAddr(ap)
	for _, port := range a.ports {
		if err == nil {
			return nil
		}
		err = a.guard.CheckAddr(netip.AddrPortFrom(ap.Addr(), port))
	}
	return err
}

// policyPorts are the ports the policy's entries name (80 and 443 for an
// entry without one), each once.
func policyPorts(p *netpolicy.Policy) []uint16 {
	seen := map[uint16]bool{}
	var out []uint16
	add := func(port uint16) {
		if !seen[port] {
			seen[port] = true
			out = append(out, port)
		}
	}
	for _, e := range p.Entries() {
		_, ps, err := net.SplitHostPort(e)
		if err != nil {
			add(80)
			add(443)
			continue
		}
		if n, err := strconv.ParseUint(ps, 10, 16); err == nil {
			add(uint16(n))
		}
	}
	return out
}

// standIn is the address the guest is told for an allowed name whose
// address it would reach on its own side of the TAP (loopback, its own
// subnet): one it routes to the gateway, so the proxy takes the
// connection and dials the name (TEST-NET-2, never a real host's).
var standIn = netip.MustParseAddr("198.51.100.1")

func present(a netip.Addr) netip.Addr {
	if a.IsLoopback() || a.IsUnspecified() || a.IsMulticast() || netip.PrefixFrom(vmnet.GuestAddr, vmnet.GuestPrefix).Masked().Contains(a) {
		return standIn
	}
	return a
}
