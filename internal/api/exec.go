package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"

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
			ModifyResponse: sanitizeGuestResponse,
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

// sanitizeGuestResponse keeps what an untrusted guest answers from acting
// on the API's origin: no cookies, no sniffing, no active content, and
// downloads are attachments.
func sanitizeGuestResponse(resp *http.Response) error {
	h := resp.Header
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	if resp.StatusCode == http.StatusOK && strings.HasSuffix(resp.Request.URL.Path, "/v1/files") &&
		resp.Request.Method == http.MethodGet {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", "attachment")
	}
	return nil
}

// guestRequest points out at a guest route through the session's host.
func guestRequest(out *http.Request, t coordinator.GuestTarget, guestPath string) {
	out.URL.Scheme, out.URL.Host, out.Host = "http", "host", "host"
	out.URL.Path = t.PathPrefix + guestPath
	out.URL.RawPath = ""
	out.Header.Del("Authorization")
	out.Header.Del("Cookie")
	for k, v := range guestHeaders(t) {
		out.Header[k] = v
	}
}

// guestHeaders carry the session's epoch and the guest API version.
func guestHeaders(t coordinator.GuestTarget) http.Header {
	h := http.Header{}
	h.Set(hostlink.HeaderEpoch, strconv.FormatInt(t.Session.Epoch, 10))
	h.Set(guestapi.HeaderVersion, strconv.Itoa(guestapi.Version))
	return h
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
	conn, resp, err := websocket.Dial(r.Context(), "http://host"+t.PathPrefix+"/v1/exec", &websocket.DialOptions{
		HTTPClient: &http.Client{Transport: t.Transport}, HTTPHeader: guestHeaders(t),
	})
	if err != nil {
		status, code := http.StatusBadGateway, "unavailable"
		if resp != nil && resp.StatusCode == http.StatusConflict {
			// The host refused: a newer op holds the session, or it is paused.
			status, code = http.StatusConflict, "conflict"
		}
		writeError(w, status, code, "start exec in the session's guest: "+err.Error())
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
