package machines_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/vmm"
)

// endlessHeaders is a guest whose every answer's headers never end; it
// counts the bytes the host took.
type endlessHeaders struct {
	wrote chan int // the bytes of each answer, once the host hung up
	done  chan struct{}
}

func (g *endlessHeaders) Info() vmm.Info { return vmm.Info{} }
func (g *endlessHeaders) Dial(context.Context) (net.Conn, error) {
	host, guest := net.Pipe()
	go func() {
		defer guest.Close()
		if _, err := http.ReadRequest(bufio.NewReader(guest)); err != nil {
			return
		}
		n, _ := io.WriteString(guest, "HTTP/1.1 200 OK\r\n")
		line := strings.Repeat("X-Forever: aaaaaaaaaaaaaaaaaaaa\r\n", 1000)
		for {
			m, err := io.WriteString(guest, line)
			n += m
			if err != nil {
				break
			}
		}
		g.wrote <- n
	}()
	return host, nil
}
func (g *endlessHeaders) Snapshot(context.Context, string) (vmm.Snapshot, error) {
	return vmm.Snapshot{}, vmm.ErrUnsupported
}
func (g *endlessHeaders) Pause(context.Context) error   { return nil }
func (g *endlessHeaders) Resume(context.Context) error  { return nil }
func (g *endlessHeaders) Destroy(context.Context) error { return nil }
func (g *endlessHeaders) Done() <-chan struct{}         { return g.done }

// TestGuestAnswerHeadersBounded: an answer whose headers never end fails
// after guestapi.MaxHeaderBytes, for the host's own calls and for what it
// relays (both use the machine's transport).
func TestGuestAnswerHeadersBounded(t *testing.T) {
	t.Parallel()
	g := &endlessHeaders{wrote: make(chan int, 10), done: make(chan struct{})}
	mc := machines.NewMachine("s1", 1, hostlink.MachineSpec{}, g, nil)
	defer mc.Transport().CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ready guestapi.Ready
	if err := mc.Call(ctx, http.MethodGet, guestapi.PathReady, nil, &ready); err == nil || ctx.Err() != nil {
		t.Fatalf("a call answered with endless headers: %v (ctx %v), want it refused", err, ctx.Err())
	}
	if n := <-g.wrote; n > guestapi.MaxHeaderBytes+64<<10 {
		t.Fatalf("the host read %d bytes of headers, over the %d byte bound", n, guestapi.MaxHeaderBytes)
	}
}
