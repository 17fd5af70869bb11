package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// QMPError is an error answer from QEMU.
type QMPError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *QMPError) Error() string { return e.Class + ": " + e.Desc }

// Event is an asynchronous QMP event.
type Event struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

type qmpMsg struct {
	QMP    json.RawMessage `json:"QMP"`
	ID     string          `json:"id"`
	Return json.RawMessage `json:"return"`
	Error  *QMPError       `json:"error"`
	Event  string          `json:"event"`
	Data   json.RawMessage `json:"data"`
}

// QMP is a client of the QEMU Machine Protocol on a unix socket. Execute
// is safe for concurrent use; answers are matched by id.
type QMP struct {
	conn    net.Conn
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[string]chan qmpMsg
	next    int
	events  chan Event
	done    chan struct{}
	err     error
}

// DialQMP connects to the QMP socket at path, reads the greeting and
// negotiates capabilities.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	conn, err := dialUnix(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("connect qmp: %w", err)
	}
	q := &QMP{conn: conn, pending: map[string]chan qmpMsg{}, events: make(chan Event, 64), done: make(chan struct{})}
	dec := json.NewDecoder(conn)
	var greet qmpMsg
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetReadDeadline(d)
	}
	if err := dec.Decode(&greet); err != nil || greet.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("connect qmp: no greeting: %v", err)
	}
	_ = conn.SetReadDeadline(noDeadline)
	go q.read(dec)
	if err := q.Execute(ctx, "qmp_capabilities", nil, nil); err != nil {
		q.Close()
		return nil, fmt.Errorf("connect qmp: %w", err)
	}
	return q, nil
}

func (q *QMP) read(dec *json.Decoder) {
	var err error
	for {
		var m qmpMsg
		if err = dec.Decode(&m); err != nil {
			break
		}
		if m.Event != "" {
			select {
			case q.events <- Event{Event: m.Event, Data: m.Data}:
			default: // nobody listening: drop
			}
			continue
		}
		q.mu.Lock()
		ch := q.pending[m.ID]
		delete(q.pending, m.ID)
		q.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
	q.mu.Lock()
	q.err = err
	q.mu.Unlock()
	close(q.done)
}

// Execute runs command with args (nil for none) and decodes the answer
// into out (nil to ignore it).
func (q *QMP) Execute(ctx context.Context, command string, args, out any) error {
	q.mu.Lock()
	q.next++
	id := strconv.Itoa(q.next)
	ch := make(chan qmpMsg, 1)
	q.pending[id] = ch
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		delete(q.pending, id)
		q.mu.Unlock()
	}()
	req := map[string]any{"execute": command, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	q.wmu.Lock()
	_, err = q.conn.Write(append(b, '\n'))
	q.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("qmp %s: %w", command, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("qmp %s: %w", command, m.Error)
		}
		if out != nil && m.Return != nil {
			if err := json.Unmarshal(m.Return, out); err != nil {
				return fmt.Errorf("qmp %s: decode answer: %w", command, err)
			}
		}
		return nil
	case <-q.done:
		return fmt.Errorf("qmp %s: connection closed: %w", command, q.closeErr())
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", command, ctx.Err())
	}
}

func (q *QMP) closeErr() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		return errors.New("closed")
	}
	return q.err
}

// Events delivers asynchronous events; events arriving while the channel
// is full are dropped.
func (q *QMP) Events() <-chan Event { return q.events }

// Done is closed when the connection ends (QEMU exited or Close).
func (q *QMP) Done() <-chan struct{} { return q.done }

// Close closes the connection.
func (q *QMP) Close() error { return q.conn.Close() }

// Status is the answer of query-status.
type Status struct {
	Running bool   `json:"running"`
	Status  string `json:"status"`
}

// QueryStatus returns the VM run state ("running", "paused", "inmigrate", ...).
func (q *QMP) QueryStatus(ctx context.Context) (Status, error) {
	var s Status
	err := q.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// dialUnix connects to a unix socket; paths longer than sun_path allows
// are reached through /proc/self/fd/N/<name> of an O_PATH directory fd.
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	if len(path) < 100 {
		return d.DialContext(ctx, "unix", path)
	}
	dir, err := os.OpenFile(filepath.Dir(path), os.O_RDONLY|0x200000 /* O_PATH */, 0)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path)))
}
