package firecracker

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/guestinit/initproto"
	"github.com/engrams/engrams/internal/vmm"
)

// kernelCmdline is the guest kernel command line: Firecracker's usual
// serial console settings plus stage-1 init's engrams.* parameters, with
// the guest daemon and the control channel on vsock ports.
func (b *Backend) kernelCmdline(hostname string) string {
	p := initproto.DefaultParams()
	// Firecracker attaches drives in the order they are configured: root
	// first (/dev/vda), then the bundle (/dev/vdb).
	p.Root, p.Bundle = "/dev/vda", "/dev/vdb"
	p.Port = "vsock:" + strconv.FormatUint(uint64(b.cfg.GuestPort), 10)
	p.CtlPort = "vsock:" + strconv.FormatUint(uint64(b.cfg.CtlPort), 10)
	p.Address, p.Gateway = "", ""
	if b.cfg.TapDevice != "" {
		p.Address, p.Gateway = b.cfg.GuestIP, b.cfg.GatewayIP
	}
	p.Hostname = sanitizeHostname(hostname)
	w := []string{"console=ttyS0", "reboot=k", "panic=1", "pci=off", "quiet", "cryptomgr.notests"}
	w = append(w, p.KernelArgs()...)
	if b.cfg.KernelArgs != "" {
		w = append(w, b.cfg.KernelArgs)
	}
	return strings.Join(w, " ")
}

func sanitizeHostname(h string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(h) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			sb.WriteRune(r)
		}
	}
	s := sb.String()
	if len(s) > 63 {
		s = s[:63]
	}
	if s == "" {
		s = "engrams"
	}
	return s
}

// newControl builds init's control message: identity, env, the host's
// clock and fresh entropy (after a restore this steps the clock and
// makes the clone's RNG diverge).
func newControl(id uint64, hostname string, env map[string]string) initproto.Control {
	ent := make([]byte, 64)
	_, _ = rand.Read(ent)
	return initproto.Control{
		ID: id, Hostname: sanitizeHostname(hostname), Env: env,
		TimeUnixNano: time.Now().UnixNano(), Entropy: ent,
	}
}

// handshake sends init its control message and waits until the guest
// daemon answers Ready; both retry until the ready timeout. rebind (a
// restore that takes a new identity) also restarts the daemon, and only
// the restarted one counts as ready.
func (m *machine) handshake(ctx context.Context, env map[string]string, rebind bool) error {
	ctx, cancel := context.WithTimeout(ctx, m.b.cfg.ReadyTimeout)
	defer cancel()
	m.mu.Lock()
	m.ctlID++
	c := newControl(m.ctlID, m.st.Hostname, env)
	m.mu.Unlock()
	c.RestartGuest = rebind
	var rep initproto.Reply
	err := retry(ctx, m.done, "guest control", func(ctx context.Context) (err error) {
		rep, err = m.sendControl(ctx, c)
		return err
	})
	if err != nil {
		return err
	}
	if rebind && rep.GuestPID == 0 {
		return fmt.Errorf("guest init did not restart the guest daemon (an init that predates rebinding): %w", vmm.ErrUnsupported)
	}
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	return retry(ctx, m.done, "guest ready", func(ctx context.Context) error {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		r, err := cl.Ready(rctx)
		if err == nil && rebind && r.PID != rep.GuestPID {
			return fmt.Errorf("guest daemon %d answers, want the restarted %d", r.PID, rep.GuestPID)
		}
		return err
	})
}

// sendControl sends c on init's control vsock port and waits for the reply
// with the same ID.
func (m *machine) sendControl(ctx context.Context, c initproto.Control) (initproto.Reply, error) {
	var rep initproto.Reply
	conn, err := dialVsock(ctx, m.vsockPath(), m.b.cfg.CtlPort)
	if err != nil {
		return rep, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	data, err := json.Marshal(c)
	if err != nil {
		return rep, err
	}
	if _, err := conn.Write(append(data, '\n')); err != nil {
		return rep, err
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return rep, fmt.Errorf("read control reply: %w", err)
		}
		if json.Unmarshal(line, &rep) != nil || rep.ID != c.ID {
			continue
		}
		if !rep.OK {
			return rep, fmt.Errorf("guest control: %s", rep.Error)
		}
		return rep, nil
	}
}

// randomID is a machine handle's first control message id: ids stay
// unique across restores of one snapshot (see initproto.Control.ID).
func randomID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) >> 2
}

// retry runs f until it succeeds, the machine exits or ctx ends.
func retry(ctx context.Context, exited <-chan struct{}, what string, f func(context.Context) error) error {
	var last error
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (last: %v)", what, vmm.ErrGuestTimeout, last)
		case <-exited:
			return fmt.Errorf("%s: firecracker exited (last: %v)", what, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
