package host

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"sync"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/host/machines"
	"github.com/engrams/engrams/internal/host/relay"
	"github.com/engrams/engrams/internal/hostlink"
)

// smallExecBody is the largest exec request the relay holds in memory.
const smallExecBody = 64 << 10

// boundReporter records a guest answer over its bound (relay.Relay).
type boundReporter interface {
	Exceeded(mc *machines.Machine, e relay.Exceeded)
}

// answerBound is the bound of a guest route's answer the relay holds to
// (0: none; exec output and downloads are the user's own, streamed).
func answerBound(rest string) (bound string, limit int64) {
	switch rest {
	case guestapi.PathFileList:
		return relay.BoundFileList, guestapi.MaxFileListBytes
	case guestapi.PathFileStat:
		return relay.BoundFileStat, guestapi.MaxAnswerBytes
	}
	return "", 0
}

// proxyToGuest forwards r to path rest of mc's guest daemon; WebSocket
// upgrades (exec, terminals) pass through. An answer over its bound
// (answerBound) is cut there (the caller's response breaks off) and
// reported to bounds.
func proxyToGuest(w http.ResponseWriter, r *http.Request, mc *machines.Machine, rest string, log *slog.Logger, bounds boundReporter) {
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy := &httputil.ReverseProxy{
		ModifyResponse: func(resp *http.Response) error {
			if bound, limit := answerBound(rest); limit > 0 {
				resp.Body = &boundedAnswer{ReadCloser: resp.Body, r: guestapi.LimitReader(resp.Body, limit), exceeded: func() {
					bounds.Exceeded(mc, relay.Exceeded{Bound: bound, Limit: limit, Got: limit + 1,
						Message: fmt.Sprintf("the guest's answer to %s %s?%s ran past %d bytes: the host ended it", r.Method, rest, r.URL.RawQuery, limit)})
				}}
			}
			return nil
		},
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "guest"
			pr.Out.URL.Path = rest
			pr.Out.URL.RawPath = ""
			pr.Out.Host = "guest"
		},
		Transport:     mc.Transport(),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			log.Info("guest proxy failed", "err", err)
			hostlink.WriteError(w, http.StatusBadGateway, hostlink.CodeBadGateway, fmt.Sprintf("reach guest of session %s: %v", mc.SessionID(), err))
		},
	}
	proxy.ServeHTTP(w, r)
}

// relayExecRun forwards a plain exec to the guest and streams its answer
// back with guestapi.RelayStream: a command that exits at once crosses the
// link as one message (the generic proxy flushes every write separately).
func relayExecRun(w http.ResponseWriter, r *http.Request, mc *machines.Machine, log *slog.Logger) {
	body := io.Reader(r.Body)
	if r.ContentLength >= 0 && r.ContentLength <= smallExecBody {
		b, err := io.ReadAll(r.Body) // in memory, it goes out with the headers in one write
		if err != nil {
			hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "read exec request: "+err.Error())
			return
		}
		body = bytes.NewReader(b)
	}
	out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://guest"+guestapi.PathExecRun, body)
	if err != nil {
		hostlink.WriteError(w, http.StatusBadRequest, hostlink.CodeBadRequest, "build guest exec: "+err.Error())
		return
	}
	out.Header = r.Header.Clone()
	out.ContentLength = r.ContentLength
	resp, err := mc.Transport().RoundTrip(out)
	if err != nil {
		log.Info("guest exec failed", "err", err)
		hostlink.WriteError(w, http.StatusBadGateway, hostlink.CodeBadGateway, "reach guest: "+err.Error())
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	guestapi.RelayStream(w, resp.Body)
}

// boundedAnswer is a guest answer read through a guestapi.LimitReader; the
// first read past the bound calls exceeded.
type boundedAnswer struct {
	io.ReadCloser
	r        io.Reader
	once     sync.Once
	exceeded func()
}

func (b *boundedAnswer) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if errors.Is(err, guestapi.ErrAnswerTooLarge) {
		b.once.Do(b.exceeded)
	}
	return n, err
}
