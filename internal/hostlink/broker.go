package hostlink

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// PathBroker is where a host hands the coordinator a guest's TLS
// connection to a brokered host (host to coordinator): GET with
// "Connection: Upgrade", "Upgrade: BrokerUpgrade", the session's epoch and
// the host:port the guest dialled as query parameters. On 101 the stream
// carries the guest's TLS bytes both ways: the coordinator's credential
// broker terminates TLS with the deployment's CA, verifies the upstream's
// certificate and puts the session's credential in on requests to that
// host only. A refusal is an ErrorBody (403 not brokered, 409 stale epoch).
const PathBroker = "/v1/sessions/{id}/broker"

// BrokerUpgrade is the Upgrade token of a PathBroker request.
const BrokerUpgrade = "engrams-broker/1"

// Query parameters of a PathBroker request.
const (
	BrokerQueryEpoch = "epoch"
	BrokerQueryHost  = "host" // name:port, lower case
)

// brokerOpenLimit bounds writing a PathBroker request and reading its
// answer's head.
const brokerOpenLimit = 30 * time.Second

// BrokerPath is PathBroker for session sid, epoch and hostPort.
func BrokerPath(sid string, epoch int64, hostPort string) string {
	q := url.Values{BrokerQueryEpoch: {strconv.FormatInt(epoch, 10)}, BrokerQueryHost: {hostPort}}
	return strings.Replace(PathBroker, "{id}", url.PathEscape(sid), 1) + "?" + q.Encode()
}

// ErrBrokerRefused is a PathBroker request the coordinator refused.
var ErrBrokerRefused = errors.New("credential broker refused")

// DialBroker opens a stream with open (Conn.OpenStream), asks for
// PathBroker on it and returns the stream once it is upgraded: what is
// written to it reaches the broker as the guest's TLS bytes. A refusal
// wraps ErrBrokerRefused with the coordinator's message.
func DialBroker(ctx context.Context, open func() (net.Conn, error), sid string, epoch int64, hostPort string) (net.Conn, error) {
	c, err := open()
	if err != nil {
		return nil, fmt.Errorf("open broker stream: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(brokerOpenLimit))
	req, err := http.NewRequest(http.MethodGet, "http://"+linkHost+BrokerPath(sid, epoch, hostPort), nil)
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("build broker request: %w", err)
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", BrokerUpgrade)
	br := bufio.NewReaderSize(io.LimitReader(c, MaxHeaderBytes), 4<<10)
	var resp *http.Response
	if err = req.Write(c); err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("broker request for %s: %w", hostPort, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(resp.Header.Get("Upgrade"), BrokerUpgrade) {
		var eb ErrorBody
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		if json.Unmarshal(msg, &eb) == nil && eb.Error != "" {
			msg = []byte(eb.Error)
		}
		_ = c.Close()
		return nil, fmt.Errorf("%w: %s: %s", ErrBrokerRefused, resp.Status, strings.TrimSpace(string(msg)))
	}
	_ = c.SetDeadline(time.Time{})
	return &upgraded{Conn: c, r: io.MultiReader(bytesOf(br), c)}, nil
}

// bytesOf is what br holds already (the limit it reads through ends with
// the head; the rest of the stream is read directly).
func bytesOf(br *bufio.Reader) io.Reader {
	b, _ := br.Peek(br.Buffered())
	return strings.NewReader(string(b))
}

// upgraded is an upgraded stream whose first bytes may have been read with
// its answer's head. A yamux stream's Close is a half close (reads go on
// until the peer closes its end), so CloseWrite is Close.
type upgraded struct {
	net.Conn
	r io.Reader
}

func (u *upgraded) Read(p []byte) (int, error) { return u.r.Read(p) }

// CloseWrite ends what this side sends.
func (u *upgraded) CloseWrite() error { return u.Conn.Close() }
