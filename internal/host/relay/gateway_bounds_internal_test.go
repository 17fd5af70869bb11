package relay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/hostlink"
)

// hostileTunnels plays a guest answering every tunnel request with answer
// (written until the host hangs up) and counts what the host took.
type hostileTunnels struct {
	answer func(w io.Writer) error

	mu      sync.Mutex
	open    int // tunnels answered and not yet closed by the host
	maxOpen int
	written int64 // bytes of the longest answer the host read
}

func (g *hostileTunnels) dial(context.Context) (net.Conn, error) {
	host, guest := net.Pipe()
	go func() {
		defer guest.Close()
		if _, err := http.ReadRequest(bufio.NewReader(guest)); err != nil {
			return
		}
		cw := &countingWriter{w: guest}
		g.mu.Lock()
		g.open++
		g.maxOpen = max(g.maxOpen, g.open)
		g.mu.Unlock()
		defer func() {
			g.mu.Lock()
			g.open--
			g.written = max(g.written, cw.n)
			g.mu.Unlock()
		}()
		if g.answer(cw) == nil {
			_, _ = io.Copy(io.Discard, guest) // hold the tunnel until the host hangs up
		}
	}()
	return host, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func endlessWriter(prefix, repeat string) func(w io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, prefix); err != nil {
			return err
		}
		chunk := strings.Repeat(repeat, (32<<10)/len(repeat))
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return err
			}
		}
	}
}

const upgraded = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + guestapi.TunnelUpgrade + "\r\n"

// TestTunnelBounds plays hostile guests to a machine's tunnel pool: an
// answer whose headers never end is cut at the header bound, and a guest
// answering every tunnel at once gets at most maxTunnels served. Each is
// reported to the session once.
func TestTunnelBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		answer    func(w io.Writer) error
		wantBound string
		wantOpen  int  // tunnels the guest sees open at most
		reached   bool // and it sees exactly that many (else 1 to wantOpen: a cut tunnel may end before the next is asked for)
	}{
		{name: "a status line without end", answer: endlessWriter("HTTP/1.1 101 ", "a"), wantBound: BoundTunnelHeader, wantOpen: tunnelPoolSize},
		{name: "endless headers", answer: endlessWriter(upgraded, "X-A: aaaaaaaaaaaaaaaa\r\n"), wantBound: BoundTunnelHeader, wantOpen: tunnelPoolSize},
		{name: "every tunnel answered at once", wantBound: BoundTunnels, wantOpen: 32, reached: true, // the stated bound
			answer: func(w io.Writer) error { _, err := io.WriteString(w, upgraded+"\r\n"); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				l := &recLink{}
				rl := New(Deps{Link: l, Epochs: oneEpoch{}})
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan struct{})
				go func() { _ = rl.Run(ctx); close(ran) }()
				g := &hostileTunnels{answer: tt.answer}
				m := &dialStub{stubMachine: stubMachine{done: make(chan struct{})}, dial: g.dial}
				mc := machines.NewMachine("s1", 1, hostlink.MachineSpec{HarnessID: "h1"}, m, nil)
				_ = rl.whileMachine(mc, func(ctx context.Context) { rl.runTunnels(ctx, mc) })
				time.Sleep(30 * time.Second) // served tunnels without a request end after tunnelHeaderLimit
				synctest.Wait()
				close(m.done)
				rl.wg.Wait()
				cancel()
				<-ran

				if got := l.bounds(); got[tt.wantBound] != 1 || len(got) != 1 {
					t.Errorf("reports %v, want one of %s", got, tt.wantBound)
				}
				if g.maxOpen > tt.wantOpen || g.maxOpen < 1 || (tt.reached && g.maxOpen != tt.wantOpen) {
					t.Errorf("the guest saw up to %d tunnels open at once, want %d (reached: %v)", g.maxOpen, tt.wantOpen, tt.reached)
				}
				if tt.wantBound == BoundTunnelHeader && g.written > guestapi.MaxHeaderBytes+8<<10 {
					t.Errorf("the host read %d bytes of an answer, over the %d byte bound", g.written, guestapi.MaxHeaderBytes)
				}
			})
		})
	}
}

// FuzzTunnelAnswer feeds the tunnel answer reader what a hostile guest may
// answer: it never panics and never reads past the header bound before
// the headers end.
func FuzzTunnelAnswer(f *testing.F) {
	f.Add([]byte(upgraded + guestapi.HeaderVersion + ": 4\r\n\r\nPOST / HTTP/1.1\r\n"))
	f.Add([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}"))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: other\r\n\r\n"))
	f.Add([]byte("HTTP/1.0 200\r\nTransfer-Encoding: chunked\r\n\r\nffffffff\r\n"))
	f.Add(append([]byte(upgraded+"X: "), bytes.Repeat([]byte("a"), guestapi.MaxHeaderBytes)...))
	f.Fuzz(func(t *testing.T, answer []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://guest"+guestapi.PathTunnel, nil)
		src := &countingReader{r: bytes.NewReader(answer)}
		resp, br, err := readTunnelAnswer(src, req)
		var over *tunnelHeaderError
		if errors.As(err, &over) && len(answer) <= guestapi.MaxHeaderBytes {
			t.Fatalf("an answer of %d bytes refused as over the bound: %v", len(answer), err)
		}
		if err != nil {
			return
		}
		if src.n > guestapi.MaxHeaderBytes {
			t.Fatalf("read %d bytes before the headers ended", src.n)
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			_, _ = io.Copy(io.Discard, br) // the tunnel's bytes: unbounded, but never a panic
		} else {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
