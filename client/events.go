package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// errStreamClosed is a followed event stream that ended without an end
// message.
var errStreamClosed = errors.New("event stream closed by the server")

// Events calls fn with each event of session id whose seq is greater than
// afterSeq, in order. Without follow it returns nil after the backlog. With
// follow it streams live events until the session is terminal and every
// event was delivered, or the server sends the end message (returning nil
// then), ctx is done (returning ctx.Err()), or fn returns an error
// (returning it). A followed stream that drops is reopened with
// Last-Event-ID set to the last seq seen, so no event is lost or repeated;
// after the configured number of failed reconnects in a row (WithReconnect)
// the last error is returned.
func (sc SessionClient) Events(ctx context.Context, id string, afterSeq int64, follow bool, fn func(apiv1.Event) error) error {
	last := afterSeq
	delay := sc.c.backoff
	failures := 0
	for attempt := 0; ; attempt++ {
		started := time.Now()
		res := sc.eventsOnce(ctx, id, last, attempt > 0, follow, fn)
		last = res.last
		switch {
		case res.fnErr != nil:
			return res.fnErr
		case res.ended:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !follow:
			return res.err
		case attempt == 0 && !res.connected:
			return res.err // never reached the stream: report at once
		}
		var ae *APIError
		if errors.As(res.err, &ae) && ae.Code != CodeUnavailable && ae.Code != CodeInternal {
			return res.err
		}
		if errors.Is(res.err, errStreamClosed) {
			done, err := sc.sessionEnded(ctx, id, &last, fn)
			if done || err != nil {
				return err
			}
		}
		if res.events > 0 || (res.connected && time.Since(started) > 2*maxBackoff) {
			failures, delay = 0, sc.c.backoff
		}
		failures++
		if failures > sc.c.retries {
			return fmt.Errorf("follow events of session %s: gave up after %d reconnects: %w", id, sc.c.retries, res.err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, maxBackoff)
	}
}

// sessionEnded tells a followed stream that ended because the session is
// terminal from a dropped one. When terminal it delivers any events still
// unseen and reports done.
func (sc SessionClient) sessionEnded(ctx context.Context, id string, last *int64, fn func(apiv1.Event) error) (bool, error) {
	s, err := sc.Get(ctx, id)
	if IsNotFound(err) {
		return true, err
	}
	if err != nil || (s.State != "completed" && s.State != "dead") {
		return false, nil // reconnect (and retry the check next time)
	}
	res := sc.eventsOnce(ctx, id, *last, true, false, fn)
	*last = res.last
	if res.fnErr != nil {
		return true, res.fnErr
	}
	return true, res.err
}

type eventsResult struct {
	last      int64 // seq of the last event delivered (or the start point)
	events    int   // events delivered on this connection
	connected bool  // the server answered 2xx
	ended     bool  // the server sent the end message
	fnErr     error // fn's error
	err       error // why the connection ended (errStreamClosed on EOF)
}

// eventsOnce opens the stream once and delivers events until it ends.
func (sc SessionClient) eventsOnce(ctx context.Context, id string, last int64, resume, follow bool, fn func(apiv1.Event) error) eventsResult {
	res := eventsResult{last: last}
	q := url.Values{}
	if !follow {
		q.Set("follow", "false")
	}
	hdr := http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
	if last > 0 {
		if resume {
			hdr.Set(apiv1.HeaderLastEventID, strconv.FormatInt(last, 10))
		} else {
			q.Set("after", strconv.FormatInt(last, 10))
		}
	}
	resp, err := sc.c.send(ctx, http.MethodGet, routePath(apiv1.RouteEvents, id), q, nil, "", hdr)
	if err != nil {
		res.err = err
		return res
	}
	defer resp.Body.Close()
	res.connected = true
	res.err = readSSE(resp.Body, func(m sseMessage) error {
		if m.event == apiv1.EventStreamEnd && m.id == "" {
			res.ended = true
			return errStop
		}
		if m.data == "" {
			return nil
		}
		var ev apiv1.Event
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			return fmt.Errorf("decode event %q: %w", m.id, err)
		}
		if ev.Seq <= res.last && res.last > 0 {
			return nil // already delivered
		}
		if err := fn(ev); err != nil {
			res.fnErr = err
			return errStop
		}
		res.last = ev.Seq
		res.events++
		return nil
	})
	if errors.Is(res.err, errStop) {
		res.err = nil
	}
	if res.err == nil && !res.ended && res.fnErr == nil {
		if follow {
			res.err = errStreamClosed
		}
	}
	return res
}

var errStop = errors.New("stop reading")

type sseMessage struct {
	id, event, data string
}

// readSSE parses a text/event-stream and calls fn per message. It returns
// nil at EOF, fn's error, or the read error.
func readSSE(r io.Reader, fn func(sseMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var m sseMessage
	var data []string
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if len(data) > 0 || m.event != "" {
				m.data = strings.Join(data, "\n")
				if err := fn(m); err != nil {
					return err
				}
			}
			m, data = sseMessage{}, nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			m.id = value
		case "event":
			m.event = value
		case "data":
			data = append(data, value)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read event stream: %w", err)
	}
	return nil
}
