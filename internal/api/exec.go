package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httputil"
	"strconv"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/hostlink"
)

// proxyGuest forwards a request (WebSocket upgrades included) to the
// session's guest daemon through its host, under the session's epoch.
func (s *Server) proxyGuest(guestPath string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t, err := s.co.Guest(r.Context(), r.PathValue("id"))
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if r.Method == http.MethodPut {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxFileBytes)
		}
		rp := &httputil.ReverseProxy{
			Transport: t.Transport,
			Rewrite: func(pr *httputil.ProxyRequest) {
				guestRequest(pr.Out, t, guestPath)
				pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			},
			ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
				if errors.Is(err, context.Canceled) {
					return
				}
				writeError(w, http.StatusBadGateway, "unavailable", "reach the session's guest: "+err.Error())
			},
		}
		rp.ServeHTTP(w, r)
	}
}

// guestRequest points out at a guest route through the session's host.
func guestRequest(out *http.Request, t coordinator.GuestTarget, guestPath string) {
	out.URL.Scheme, out.URL.Host, out.Host = "http", "host", "host"
	out.URL.Path = t.PathPrefix + guestPath
	out.URL.RawPath = ""
	out.Header.Del("Authorization")
	out.Header.Del("Cookie")
	out.Header.Set(hostlink.HeaderEpoch, strconv.FormatInt(t.Session.Epoch, 10))
	out.Header.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
}

// exec runs a command to completion and streams its output as NDJSON.
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req apiv1.ExecRequest
	if !s.decode(w, r, &req) {
		return
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		writeError(w, http.StatusBadRequest, "bad_request", "argv must name a command")
		return
	}
	t, err := s.co.Guest(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hdr := http.Header{}
	probe := &http.Request{URL: r.URL.JoinPath(), Header: hdr}
	guestRequest(probe, t, "/v1/exec")
	conn, _, err := websocket.Dial(r.Context(), probe.URL.String(), &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: t.Transport}, HTTPHeader: hdr,
	})
	if err != nil {
		writeError(w, http.StatusBadGateway, "unavailable", "start exec in the session's guest: "+err.Error())
		return
	}
	defer conn.CloseNow()
	conn.SetReadLimit(4 << 20)
	start := guestapi.ExecStart{Argv: req.Argv, Env: req.Env, Dir: req.Dir, TimeoutMS: req.TimeoutMS, Stdin: len(req.Stdin) > 0}
	if err := sendExecStart(r.Context(), conn, start, req.Stdin); err != nil {
		writeError(w, http.StatusBadGateway, "unavailable", "send exec to the session's guest: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	streamExec(r.Context(), conn, w)
}

func sendExecStart(ctx context.Context, conn *websocket.Conn, start guestapi.ExecStart, stdin []byte) error {
	b, _ := json.Marshal(start)
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		return err
	}
	if !start.Stdin {
		return nil
	}
	if err := conn.Write(ctx, websocket.MessageBinary, append([]byte{guestapi.ChanStdin}, stdin...)); err != nil {
		return err
	}
	b, _ = json.Marshal(guestapi.Control{Type: "stdin_close"})
	return conn.Write(ctx, websocket.MessageText, b)
}

// streamExec relays guest frames as NDJSON lines until the exit message.
func streamExec(ctx context.Context, conn *websocket.Conn, w http.ResponseWriter) {
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			_ = enc.Encode(apiv1.ExecFrame{Type: "exit", ExitCode: -1, Error: "lost the guest before the command exited: " + err.Error()})
			flush()
			return
		}
		if typ == websocket.MessageBinary {
			if len(msg) == 0 {
				continue
			}
			name := "stdout"
			if msg[0] == guestapi.ChanStderr {
				name = "stderr"
			}
			_ = enc.Encode(apiv1.ExecFrame{Type: name, Data: msg[1:]})
			flush()
			continue
		}
		var c guestapi.Control
		if json.Unmarshal(msg, &c) != nil || c.Type != "exit" {
			continue
		}
		_ = enc.Encode(apiv1.ExecFrame{Type: "exit", ExitCode: c.ExitCode, Error: c.Error, TimedOut: c.TimedOut})
		flush()
		// End the response now; a close handshake would cost a round trip
		// through host and guest before the client sees the stream end.
		_ = conn.CloseNow()
		return
	}
}
