package slackapp

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/coder/websocket"
)

// socketLoop takes events over Socket Mode (an outbound WebSocket: no
// public URL needed) while Slack is configured with socket_mode and an
// app-level token, reconnecting with a growing pause.
func (a *App) socketLoop(ctx context.Context) {
	pause := time.Second
	for ctx.Err() == nil {
		c, err := a.conf(ctx)
		if err != nil || !c.SocketMode || c.app == "" {
			sleep(ctx, 10*time.Second)
			continue
		}
		start := time.Now()
		if err := a.socketOnce(ctx, c); err != nil && ctx.Err() == nil {
			a.log.Warn("slack socket mode", "err", err)
		}
		if time.Since(start) > time.Minute {
			pause = time.Second
		}
		sleep(ctx, pause)
		pause = min(2*pause, 30*time.Second)
	}
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

// socketOnce holds one Socket Mode connection: each events_api envelope
// is acknowledged, then acted on as an Events API delivery (the socket,
// opened with the app token, stands for the signature).
func (a *App) socketOnce(ctx context.Context, c conf) error {
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
		env, err := decodeEnvelope(f.Payload)
		if err != nil {
			a.log.Warn("slack socket mode envelope", "err", err)
			continue
		}
		if err := a.dispatch(ctx, c, env); err != nil {
			a.log.Warn("slack event", "event_id", env.EventID, "err", err)
		}
	}
}
