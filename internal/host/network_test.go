package host_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/host"
	"github.com/engrams/engrams/internal/hostlink"
)

// fakeNetwork is a MachineNetwork whose TAP is one end of a pipe.
type fakeNetwork struct {
	tap    *os.File
	closed chan struct{}
	once   sync.Once
}

func (n *fakeNetwork) TapFile() *os.File { return n.tap }
func (n *fakeNetwork) Close() error {
	n.once.Do(func() { close(n.closed); n.tap.Close() })
	return nil
}

// TestNetworkPerMachine: each boot gets a network of its own from
// Deps.Network, handed to the backend, and destroying the machine
// removes it; a session the func gives none boots without.
func TestNetworkPerMachine(t *testing.T) {
	t.Parallel()
	c := newCoord(20 * time.Millisecond)
	w := newWorld()
	t.Cleanup(w.destroyAll)
	dir := t.TempDir()
	var mu sync.Mutex
	nets := map[string]*fakeNetwork{}
	runAgentWith(t, serve(t, c), dir, w, func(_ *host.Config, d *host.Deps) {
		d.Network = func(_ context.Context, sid string, _ hostlink.MachineSpec, _ host.NetworkDeps) (host.MachineNetwork, error) {
			if sid == "plain" {
				return nil, nil
			}
			r, wr, err := os.Pipe()
			if err != nil {
				return nil, err
			}
			wr.Close()
			n := &fakeNetwork{tap: r, closed: make(chan struct{})}
			mu.Lock()
			nets[sid] = n
			mu.Unlock()
			return n, nil
		}
	})
	recv(t, c.registers, nil)
	c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1}, hostlink.Ownership{SessionID: "plain", Epoch: 1})
	spec := hostlink.MachineSpec{MemoryMiB: 512, VCPUs: 1}
	for _, sid := range []string{"s1", "plain"} {
		if status, body := c.start(t, sid, 1, spec); status != http.StatusOK {
			t.Fatalf("start %s: %d %s", sid, status, body)
		}
	}
	mu.Lock()
	n := nets["s1"]
	mu.Unlock()
	m := w.machine(dir, "s1")
	if n == nil || m.spec.Network == nil || m.spec.Network.Tap != n.tap {
		t.Fatalf("machine s1 booted with network %+v, want the TAP of %+v", m.spec.Network, n)
	}
	if p := w.machine(dir, "plain"); p.spec.Network != nil || nets["plain"] != nil {
		t.Errorf("machine plain got a network: %+v", p.spec.Network)
	}
	select {
	case <-n.closed:
		t.Fatal("the network closed while its machine runs")
	default:
	}
	if status, body := c.do(t, http.MethodDelete, "/v1/machines/s1", 2, nil); status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", status, body)
	}
	select {
	case <-n.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("destroying the machine left its network")
	}
}

// rejoinCall is one Deps.Network call a restarted agent made.
type rejoinCall struct {
	sid    string
	spec   hostlink.MachineSpec
	rejoin *host.RunningTap
	net    *fakeNetwork // nil: refused
}

// TestNetworkRejoinedAfterRestart: an agent restarted while a machine
// with a network runs asks Deps.Network to rejoin the TAP its VMM holds,
// with the egress policy of the machine's record; the rejoined path is
// removed with the machine. A rejoin that fails leaves the machine
// adopted (its guest then reaches nothing).
func TestNetworkRejoinedAfterRestart(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		c := newCoord(20 * time.Millisecond)
		url := serve(t, c)
		w := newWorld()
		t.Cleanup(w.destroyAll)
		dir := t.TempDir()
		netFunc := func(calls chan<- rejoinCall) host.NetworkFunc {
			return func(_ context.Context, sid string, spec hostlink.MachineSpec, deps host.NetworkDeps) (host.MachineNetwork, error) {
				if fail && deps.Rejoin != nil {
					calls <- rejoinCall{sid, spec, deps.Rejoin, nil}
					return nil, os.ErrPermission
				}
				r, wr, err := os.Pipe()
				if err != nil {
					return nil, err
				}
				wr.Close()
				n := &fakeNetwork{tap: r, closed: make(chan struct{})}
				if calls != nil {
					calls <- rejoinCall{sid, spec, deps.Rejoin, n}
				}
				return n, nil
			}
		}
		stop := runAgentWith(t, url, dir, w, func(_ *host.Config, d *host.Deps) { d.Network = netFunc(nil) })
		recv(t, c.registers, nil)
		c.setOwned(hostlink.Ownership{SessionID: "s1", Epoch: 1})
		spec := hostlink.MachineSpec{MemoryMiB: 512, VCPUs: 1, Egress: []string{"a.test:443"}, Brokered: []string{"a.test:443"}}
		if status, body := c.start(t, "s1", 1, spec); status != http.StatusOK {
			t.Fatalf("start: %d %s", status, body)
		}
		stop()

		calls := make(chan rejoinCall, 4)
		runAgentWith(t, url, dir, w, func(_ *host.Config, d *host.Deps) { d.Network = netFunc(calls) })
		reg := recv(t, c.registers, nil)
		if machineState(reg.Machines, "s1") != "running" {
			t.Fatalf("fail=%v: registered machines = %+v", fail, reg.Machines)
		}
		var call rejoinCall
		select {
		case call = <-calls:
		case <-time.After(10 * time.Second):
			t.Fatalf("fail=%v: the restarted agent asked for no network", fail)
		}
		m := w.machine(dir, "s1")
		if call.sid != "s1" || call.rejoin == nil || *call.rejoin != (host.RunningTap{PID: m.info.PID, FD: 3}) ||
			strings.Join(call.spec.Egress, ",") != "a.test:443" || strings.Join(call.spec.Brokered, ",") != "a.test:443" {
			t.Errorf("fail=%v: Network called with %+v (rejoin %+v), want s1's TAP at pid %d fd 3 and its policy", fail, call, call.rejoin, m.info.PID)
		}
		if status, body := c.do(t, http.MethodDelete, "/v1/machines/s1", 2, nil); status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", status, body)
		}
		if call.net == nil {
			continue
		}
		select {
		case <-call.net.closed:
		case <-time.After(10 * time.Second):
			t.Fatal("destroying the recovered machine left its rejoined network")
		}
	}
}
