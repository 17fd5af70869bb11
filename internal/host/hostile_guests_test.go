package host_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// Hostile guest stand-ins: each plays one attack from the guest side of
// the guest API, the way a root guest replacing its daemon could.
const (
	attackLine      = "line"       // an endless event line
	attackHuge      = "huge"       // a 1 GiB event, then a good one
	attackFlood     = "flood"      // 10,000 events a second
	attackRewind    = "rewind"     // a shorter log on every connection
	attackTunnelHdr = "tunnel-hdr" // tunnel answers whose headers never end
	attackTunnels   = "tunnels"    // every tunnel answered at once: 1,000 wanted
	attackListing   = "listing"    // an endless file listing
	calm            = "calm"       // answers exec, nothing else
)

// standIn is one machine's guest daemon stand-in.
type standIn struct {
	attack string

	mu          sync.Mutex
	tunnelsOpen int
	tunnelsMax  int
}

func (g *standIn) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+guestapi.PathReady, func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"version":%d}`, guestapi.Version)
	})
	mux.HandleFunc("GET "+guestapi.PathHarness, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"state":"ready","gateway":"http://127.0.0.1:4780"}`)
	})
	mux.HandleFunc("POST "+guestapi.PathExecRun, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"type":"stdout","data":"b2sK"}`+"\n"+`{"type":"exit","exit_code":0}`+"\n")
	})
	mux.HandleFunc("GET "+guestapi.PathFileList, func(w http.ResponseWriter, _ *http.Request) {
		if g.attack != attackListing {
			_, _ = io.WriteString(w, "[]")
			return
		}
		_, _ = io.WriteString(w, `[{"name":"`)
		writeForever(w, "a")
	})
	mux.HandleFunc("GET "+guestapi.PathHarnessEvents, g.events)
	mux.HandleFunc("GET "+guestapi.PathTunnel, g.tunnel)
	return mux
}

// writeForever writes repeat until the host hangs up.
func writeForever(w io.Writer, repeat string) {
	chunk := strings.Repeat(repeat, (32<<10)/len(repeat))
	for {
		if _, err := io.WriteString(w, chunk); err != nil {
			return
		}
	}
}

func eventLine(seq int64, text string) string {
	return fmt.Sprintf(`{"seq":%d,"type":"assistant_text","data":{"text":%q}}`+"\n", seq, text)
}

func (g *standIn) events(w http.ResponseWriter, r *http.Request) {
	after, _ := strconv.ParseInt(r.URL.Query().Get("after"), 10, 64)
	if g.attack == attackRewind {
		w.Header().Set(guestapi.HeaderHarnessHead, "0")
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	defer bw.Flush()
	switch g.attack {
	case attackLine:
		_, _ = io.WriteString(bw, eventLine(1, "one")+`{"seq":2,"type":"assistant_text","data":{"text":"`)
		writeForever(bw, "a")
		return
	case attackHuge:
		if after < 1 {
			_, _ = io.WriteString(bw, eventLine(1, "one"))
		}
		if after < 2 {
			_, _ = io.WriteString(bw, `{"seq":2,"type":"assistant_text","data":{"text":"`)
			chunk := strings.Repeat("a", 64<<10)
			for range (1 << 30) / len(chunk) {
				if _, err := io.WriteString(bw, chunk); err != nil {
					return
				}
			}
			_, _ = io.WriteString(bw, "\"}}\n")
		}
		_, _ = io.WriteString(bw, eventLine(3, "three"))
	case attackRewind:
		for seq := int64(1); seq <= 3; seq++ {
			_, _ = io.WriteString(bw, eventLine(seq, "again"))
		}
		return
	case attackFlood:
		g.flood(bw, r, after)
		return
	}
	_ = bw.Flush()
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

// flood writes 100 events every 10 ms: 10,000 a second.
func (g *standIn) flood(bw *bufio.Writer, r *http.Request, after int64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	seq := after
	for {
		for range 100 {
			seq++
			if _, err := io.WriteString(bw, eventLine(seq, "flood")); err != nil {
				return
			}
		}
		if bw.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
		}
	}
}

func (g *standIn) tunnel(w http.ResponseWriter, r *http.Request) {
	if g.attack != attackTunnels && g.attack != attackTunnelHdr {
		<-r.Context().Done() // no process connects: the host's request waits
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	const upgraded = "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + guestapi.TunnelUpgrade + "\r\n"
	if g.attack == attackTunnelHdr {
		_, _ = io.WriteString(conn, upgraded)
		writeForever(conn, "X-Forever: aaaaaaaaaaaaaaaa\r\n")
		return
	}
	g.mu.Lock()
	g.tunnelsOpen++
	g.tunnelsMax = max(g.tunnelsMax, g.tunnelsOpen)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.tunnelsOpen--
		g.mu.Unlock()
	}()
	if _, err := io.WriteString(conn, upgraded+"\r\n"); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, brw) // a "process" that holds its connection, as 1,000 would
}

func (g *standIn) maxTunnels() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tunnelsMax
}

// serveStandIn serves g on sock until the returned stop.
func serveStandIn(sock string, g *standIn) (stop func(), err error) {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: g.handler()}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return func() { _ = srv.Close(); <-done }, nil
}
