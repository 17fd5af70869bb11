package server

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

// outcome is what the test handler saw.
type outcome struct {
	read    int
	err     error
	ctxDone bool // the request's context ended while the handler waited
}

// TestBodyRate: a trickled body is cut, whether the handler reads it or
// not; bodies that flow (fast, or steady above the rate) are read whole;
// a handler that waits after reading its body, or serves a request
// without one, keeps its connection past the window.
func TestBodyRate(t *testing.T) {
	t.Parallel()
	const window, min = 300 * time.Millisecond, 1024
	tests := []struct {
		name    string
		method  string
		size    int           // Content-Length
		chunk   int           // bytes per write
		every   time.Duration // between writes
		read    bool          // the handler reads the body
		wait    bool          // the handler waits 3 windows after reading
		wantCut bool
	}{
		{name: "trickle, 1 byte at a time", method: "POST", size: 1 << 20, chunk: 1, every: 10 * time.Millisecond, read: true, wantCut: true},
		{name: "trickle to a handler that never reads", method: "POST", size: 200 << 10, chunk: 1, every: 10 * time.Millisecond, wantCut: true},
		{name: "fast 8 MiB upload", method: "PUT", size: 8 << 20, chunk: 64 << 10, read: true},
		{name: "steady upload above the rate", method: "PUT", size: 256 << 10, chunk: 16 << 10, every: 20 * time.Millisecond, read: true},
		{name: "body, then a long wait", method: "POST", size: 2 * min, chunk: 2 * min, read: true, wait: true}, // its last read moves the deadline
		{name: "no body, a long wait", method: "GET", wait: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := make(chan outcome, 1)
			srv := httptest.NewServer(limitBodyRate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var o outcome
				if tt.read {
					n, err := io.Copy(io.Discard, r.Body)
					o.read, o.err = int(n), err
				}
				if tt.wait {
					select {
					case <-r.Context().Done():
						o.ctxDone = true
					case <-time.After(3 * window):
					}
				}
				got <- o
				w.WriteHeader(http.StatusNoContent)
			}), window, min))
			t.Cleanup(srv.Close)
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			fmt.Fprintf(conn, "%s / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", tt.method, tt.size)
			stop := make(chan struct{})
			sent := make(chan int, 1)
			go func() { sent <- send(conn, tt.size, tt.chunk, tt.every, stop) }()
			resp, rerr := http.ReadResponse(bufio.NewReader(conn), nil)
			close(stop)
			n := <-sent
			switch {
			case tt.wantCut && n >= tt.size:
				t.Fatalf("the whole body (%d bytes) went in: not cut", n)
			case tt.wantCut && tt.read:
				if o := <-got; !errors.Is(o.err, os.ErrDeadlineExceeded) {
					t.Errorf("handler read %d bytes, err %v; want the deadline's error", o.read, o.err)
				}
			case tt.wantCut: // the answer came, and the connection ends after it
				if rerr != nil || resp.StatusCode != http.StatusNoContent {
					t.Fatalf("answer %v, %v", resp, rerr)
				}
				if _, err := io.ReadAll(conn); err != nil && !isClosed(err) {
					t.Errorf("after the answer: %v; want the connection closed", err)
				}
			default:
				o := <-got
				if rerr != nil || resp.StatusCode != http.StatusNoContent || o.err != nil || o.read != tt.size || o.ctxDone || n != tt.size {
					t.Errorf("answer %v %v; handler %+v; sent %d of %d", resp, rerr, o, n, tt.size)
				}
			}
		})
	}
}

// send writes size bytes in chunks, one every every, until stop or a
// failed write; it returns how many went out.
func send(conn net.Conn, size, chunk int, every time.Duration, stop <-chan struct{}) int {
	buf := bytes.Repeat([]byte("x"), max(chunk, 1))
	sent := 0
	for sent < size {
		select {
		case <-stop:
			return sent
		default:
		}
		n, err := conn.Write(buf[:min(chunk, size-sent)])
		sent += n
		if err != nil {
			return sent
		}
		if every > 0 {
			select {
			case <-stop:
				return sent
			case <-time.After(every):
			}
		}
	}
	return sent
}

func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "connection reset")
}
