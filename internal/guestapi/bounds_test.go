package guestapi_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/engrams/engrams/internal/guestapi"
)

func TestLimitReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		n       int64
		want    string
		wantErr error
	}{
		{"abc", 3, "abc", nil},
		{"abc", 5, "abc", nil},
		{"abcd", 3, "abc", guestapi.ErrAnswerTooLarge},
		{"", 0, "", nil},
		{"a", 0, "", guestapi.ErrAnswerTooLarge},
	}
	for _, tt := range tests {
		got, err := io.ReadAll(guestapi.LimitReader(strings.NewReader(tt.in), tt.n))
		if string(got) != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("LimitReader(%q, %d): %q, %v; want %q, %v", tt.in, tt.n, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestClientBoundsAnswers: a daemon answering a listing or a stat past its
// bound gets an error, never a decode of everything it sends.
func TestClientBoundsAnswers(t *testing.T) {
	t.Parallel()
	endless := func(w http.ResponseWriter, prefix string) {
		_, _ = io.WriteString(w, prefix)
		chunk := strings.Repeat("a", 64<<10)
		for {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathFileList, func(w http.ResponseWriter, _ *http.Request) { endless(w, `[{"name":"`) })
	mux.HandleFunc("GET "+guestapi.PathFileStat, func(w http.ResponseWriter, _ *http.Request) { endless(w, `{"name":"`) })
	c := serveOnPipe(t, mux)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.List(ctx, "/"); !errors.Is(err, guestapi.ErrAnswerTooLarge) {
		t.Errorf("an endless listing: %v, want ErrAnswerTooLarge", err)
	}
	if _, err := c.Stat(ctx, "/"); !errors.Is(err, guestapi.ErrAnswerTooLarge) {
		t.Errorf("an endless stat: %v, want ErrAnswerTooLarge", err)
	}
}

func serveOnPipe(t *testing.T, h http.Handler) *guestapi.Client {
	t.Helper()
	l := &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(l) }()
	c := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		select {
		case l.conns <- b:
			return a, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	t.Cleanup(func() { c.Close(); _ = srv.Close(); <-served })
	return c
}

type pipeListener struct {
	conns chan net.Conn
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// TestMuxRefusesGuestStreams: a guest that opens streams toward the host
// (which never takes any) loses its session, instead of parking a stream
// window of bytes per stream on the host.
func TestMuxRefusesGuestStreams(t *testing.T) {
	t.Parallel()
	host, guestEnd := socketPair(t)
	defer guestEnd.Close()
	guestSess := make(chan *yamux.Session, 1)
	go func() {
		r, err := guestapi.AwaitHello(guestEnd)
		if err != nil {
			return
		}
		s, err := yamux.Server(struct {
			io.Reader
			io.Writer
			io.Closer
		}{r, guestEnd, guestEnd}, guestapi.YamuxConfig(nil))
		if err != nil {
			return
		}
		guestSess <- s
	}()
	mux, err := guestapi.NewMux(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	defer mux.Close()
	gs := <-guestSess
	defer gs.Close()
	for i := range 8 {
		st, err := gs.OpenStream()
		if err != nil {
			break
		}
		_, _ = fmt.Fprintf(st, "stream %d: %s", i, strings.Repeat("x", 64<<10))
	}
	select {
	case <-mux.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the host kept a session whose guest opens streams")
	}
}
