package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// listen opens a dedicated connection that LISTENs on the wake channel.
func listen(ctx context.Context, cfg *pgx.ConnConfig) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return nil, fmt.Errorf("listen: connect: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+channel); err != nil {
		_ = conn.Close(context.Background())
		return nil, fmt.Errorf("listen: %w", err)
	}
	return conn, nil
}

// runListener fans notifications out to local subscribers until ctx ends,
// reconnecting with backoff when the connection fails. After a reconnect it
// wakes every subscriber, since notifications may have been missed.
func (s *Store) runListener(ctx context.Context, cfg *pgx.ConnConfig, conn *pgx.Conn) {
	defer s.wg.Done()
	const minBackoff, maxBackoff = 100 * time.Millisecond, 5 * time.Second
	backoff := minBackoff
	for {
		if conn != nil {
			err := s.receive(ctx, conn)
			_ = conn.Close(context.Background())
			conn = nil
			if ctx.Err() != nil {
				return
			}
			s.log.Warn("postgres listener lost its connection", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		c, err := listen(ctx, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			backoff = min(backoff*2, maxBackoff)
			s.log.Warn("postgres listener cannot reconnect", "err", err, "retry_in", backoff)
			continue
		}
		conn, backoff = c, minBackoff
		s.log.Info("postgres listener reconnected")
		s.hub.WakeAll()
	}
}

// receive delivers notifications until the connection fails or ctx ends.
func (s *Store) receive(ctx context.Context, conn *pgx.Conn) error {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.hub.Wake(n.Payload)
	}
}
