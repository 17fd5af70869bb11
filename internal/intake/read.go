package intake

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Refusal is a request refused before it is verified, with its status.
type Refusal struct {
	Status int
	Msg    string
}

func (r *Refusal) Error() string { return r.Msg }

// Read reads a delivery of src from r, bounded before a byte is verified:
// headers over their bound are 431; a declared Content-Length over the
// receiver's MaxBody is 413 at once (before any read); a body that grows
// past it is 413; a body that stalls past BodyTimeout is 408.
func (p *Pipeline) Read(w http.ResponseWriter, r *http.Request, src connector.Source) (connector.Request, error) {
	rcv, ok := p.rcv[src]
	if !ok {
		return connector.Request{}, &Refusal{http.StatusNotFound, fmt.Sprintf("%s deliveries are not taken here", src)}
	}
	refuse := func(status int, msg string) (connector.Request, error) {
		w.Header().Set("Connection", "close")
		return connector.Request{}, &Refusal{status, msg}
	}
	if n := headerBytes(r.Header); n > p.cfg.MaxHeaderBytes {
		return refuse(http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the headers have %d bytes, at most %d", n, p.cfg.MaxHeaderBytes))
	}
	limit := rcv.MaxBody()
	if r.ContentLength > limit {
		return refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body declares %d bytes, at most %s", r.ContentLength, domain.SizeText(limit)))
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(p.cfg.BodyTimeout)) // a writer without deadlines: the server's own timeouts
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		_ = rc.SetReadDeadline(time.Time{})
	} // else the rest is not read: the connection closes after the answer, the deadline stays
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		return refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %s", domain.SizeText(limit)))
	case errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return refuse(http.StatusRequestTimeout, fmt.Sprintf("the body did not arrive within %s", p.cfg.BodyTimeout))
	case err != nil:
		return refuse(http.StatusBadRequest, "the body could not be read")
	}
	return connector.Request{Header: r.Header, Body: body, Slug: r.PathValue("slug")}, nil
}

// headerBytes is the size of h's names and values.
func headerBytes(h http.Header) int {
	n := 0
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
