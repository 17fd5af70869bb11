package slackapp

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/connector"
)

// Deliverer takes a delivery its transport vouches for (the delivery
// pipeline, intake.Pipeline): it is deduplicated, admitted and started
// like a signed one.
type Deliverer interface {
	DeliverVouched(ctx context.Context, src connector.Source, v connector.Verified, req connector.Request) error
}

// Socket takes Slack's events over Socket Mode (an outbound WebSocket: no
// public URL needed) into the delivery pipeline.
type Socket struct {
	a  *App
	in Deliverer
}

// NewSocket returns the Socket Mode receiver of a's Slack, delivering to in.
func NewSocket(a *App, in Deliverer) *Socket { return &Socket{a: a, in: in} }

// Run holds a Socket Mode connection while Slack is configured with
// socket_mode and an app-level token, reconnecting with a growing pause,
// until ctx ends.
func (s *Socket) Run(ctx context.Context) error {
	a := s.a
	pause := time.Second
	for ctx.Err() == nil {
		c, err := a.conf(ctx)
		if err != nil || !c.SocketMode || c.app == "" {
			sleep(ctx, 10*time.Second)
			continue
		}
		start := time.Now()
		if err := s.once(ctx, c); err != nil && ctx.Err() == nil {
			a.log.Warn("slack socket mode", "err", err)
		}
		if time.Since(start) > time.Minute {
			pause = time.Second
		}
		sleep(ctx, pause)
		pause = min(2*pause, 30*time.Second)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// socketFrame is one Socket Mode message from Slack.
type socketFrame struct {
	Type       string          `json:"type"`
	EnvelopeID string          `json:"envelope_id"`
	Payload    json.RawMessage `json:"payload"`
}

// once holds one Socket Mode connection: each events_api envelope is
// acknowledged, then delivered as an Events API delivery (the socket,
// opened with the app token, stands for the signature).
func (s *Socket) once(ctx context.Context, c conf) error {
	a := s.a
	w := web{base: c.APIURL, token: c.app, http: a.http}
	url, err := w.connectionsOpen(ctx)
	if err != nil {
		return err
	}
	conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPClient: a.http})
	if err != nil {
		return fmt.Errorf("connect to slack socket mode: %w", err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(MaxEventBody + 4096)
	a.log.Info("slack socket mode connected")
	for {
		_, b, err := conn.Read(ctx)
		if err != nil {
			return fmt.Errorf("read slack socket mode: %w", err)
		}
		var f socketFrame
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("slack socket mode sent a frame that is not JSON: %w", err)
		}
		switch f.Type {
		case "hello":
			continue
		case "disconnect":
			return nil
		}
		if f.EnvelopeID != "" {
			ack, _ := json.Marshal(map[string]string{"envelope_id": f.EnvelopeID})
			if err := conn.Write(ctx, websocket.MessageText, ack); err != nil {
				return fmt.Errorf("acknowledge a slack envelope: %w", err)
			}
		}
		if f.Type != "events_api" {
			continue
		}
		if err := s.in.DeliverVouched(ctx, connector.SourceSlack, Vouched(f.Payload), connector.Request{Body: f.Payload}); err != nil {
			a.log.Warn("slack socket mode event", "err", err)
		}
	}
}
