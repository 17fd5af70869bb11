package firecracker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrVsockRefused is returned when Firecracker closes a host-initiated vsock
// connection instead of acknowledging it: nothing listens on the guest port.
var ErrVsockRefused = errors.New("vsock connection refused by the guest")

// dialVsock opens a stream to guest vsock port through Firecracker's
// host-side Unix socket: connect, send "CONNECT <port>\n", read
// "OK <hostport>\n". The returned conn carries only the guest's bytes.
func dialVsock(ctx context.Context, uds string, port uint32) (net.Conn, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", uds)
	if err != nil {
		return nil, fmt.Errorf("dial vsock port %d: %w", port, err)
	}
	if err := vsockHandshake(ctx, conn, port); err != nil {
		conn.Close()
		return nil, fmt.Errorf("dial vsock port %d: %w", port, err)
	}
	return conn, nil
}

// vsockHandshake runs the CONNECT exchange on conn.
func vsockHandshake(ctx context.Context, conn net.Conn, port uint32) error {
	deadline := time.Now().Add(5 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write([]byte("CONNECT " + strconv.FormatUint(uint64(port), 10) + "\n")); err != nil {
		return err
	}
	line, err := readLine(conn, 64)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("no answer to CONNECT: %w", context.DeadlineExceeded)
		}
		return fmt.Errorf("%w: %v", ErrVsockRefused, err)
	}
	rest, ok := strings.CutPrefix(line, "OK ")
	if !ok {
		return fmt.Errorf("unexpected vsock answer %q", line)
	}
	if _, err := strconv.ParseUint(rest, 10, 32); err != nil {
		return fmt.Errorf("unexpected vsock answer %q", line)
	}
	return nil
}

// readLine reads one '\n'-terminated line a byte at a time, so no byte of
// the stream after it is consumed.
func readLine(conn net.Conn, max int) (string, error) {
	buf := make([]byte, 0, 16)
	var b [1]byte
	for len(buf) < max {
		if _, err := conn.Read(b[:]); err != nil {
			return string(buf), err
		}
		if b[0] == '\n' {
			return string(buf), nil
		}
		buf = append(buf, b[0])
	}
	return string(buf), fmt.Errorf("line longer than %d bytes", max)
}
