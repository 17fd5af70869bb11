package egressnet

import (
	"context"
	"fmt"
	"net"
	"os"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/egress"
	"github.com/engrams/engrams/internal/netpolicy"
)

// ProxyOnly is the path of a machine without a TAP (the process backend):
// an explicit egress proxy (CONNECT and absolute-form HTTP only) on the
// host's loopback serving the session's allowlist, which the guest is
// pointed at by HTTP_PROXY and HTTPS_PROXY. Nothing is enforced: a tool
// that ignores the variables reaches whatever the host can.
type ProxyOnly struct {
	addr   string
	ln     net.Listener
	stages *stages
}

// MakeProxyOnly starts sid's proxy-only path; nil, nil when m.Allow is
// empty (the variables then point nowhere: no proxy is set). Brokered
// hosts are not brokered here (their TLS is passed through like any
// other allowed host's).
func (p *Paths) MakeProxyOnly(_ context.Context, sid string, m Machine) (*ProxyOnly, error) {
	if len(m.Allow) == 0 {
		return nil, nil
	}
	policy, err := netpolicy.Compile(m.Allow)
	if err != nil {
		return nil, fmt.Errorf("compile the egress policy of session %s: %w", sid, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress proxy of session %s: %w", sid, err)
	}
	log := p.log.With("session_id", sid)
	events := p.events(m.Sink)
	cfg := p.cfg.Proxy
	cfg.PlaceholderPrefix = domain.PlaceholderPrefix
	proxy, err := egress.NewProxy(cfg, egress.ProxyDeps{Listener: ln, Names: policy, Dialer: p.guard, Events: events, Logger: log})
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("egress proxy of session %s: %w", sid, err)
	}
	po := &ProxyOnly{addr: ln.Addr().String(), ln: ln}
	po.stages = startStages(log, []func(context.Context) error{proxy.Run}, events, m.Sink)
	return po, nil
}

// noProxy keeps the guest's own loopback (its model gateway listener)
// off the proxy.
const noProxy = "localhost,127.0.0.1,::1"

// TapFile is nil: the guest shares the host's network.
func (po *ProxyOnly) TapFile() *os.File { return nil }

// ProxyEnv points the guest's tools at the proxy.
func (po *ProxyOnly) ProxyEnv() map[string]string {
	u := "http://" + po.addr
	return map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u, "NO_PROXY": noProxy, "no_proxy": noProxy}
}

// Close stops the proxy and posts its last events.
func (po *ProxyOnly) Close() error {
	_ = po.stages.stop(po.ln.Close)
	return nil
}
