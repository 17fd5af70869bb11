package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// TaskClient calls the task routes. Client.Tasks returns one.
type TaskClient struct{ c *Client }

// Tasks returns the client of the task routes.
func (c *Client) Tasks() TaskClient { return TaskClient{c} }

// Start starts an agent on a prompt from a profile. It returns once the
// task is recorded; its session starts in the background (follow it with
// Events).
func (tc TaskClient) Start(ctx context.Context, req apiv1.StartTaskRequest) (apiv1.Task, error) {
	var t apiv1.Task
	err := tc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteStartTask, ""), nil, req, &t)
	return t, err
}

// List lists tasks oldest first, narrowed by profile and states ("" for all).
func (tc TaskClient) List(ctx context.Context, profile, states string) ([]apiv1.Task, error) {
	q := url.Values{}
	if profile != "" {
		q.Set("profile", profile)
	}
	if states != "" {
		q.Set("state", states)
	}
	return listAll(ctx, tc.c, routePath(apiv1.RouteListTasks, ""), q, func(l apiv1.TaskList) ([]apiv1.Task, string) { return l.Items, l.NextCursor })
}

// Get returns a task with its receipt and sessions.
func (tc TaskClient) Get(ctx context.Context, id string) (apiv1.Task, error) {
	var t apiv1.Task
	err := tc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetTask, id), nil, nil, &t)
	return t, err
}

// Send adds a follow-up prompt; a suspended session resumes to take it.
func (tc TaskClient) Send(ctx context.Context, id, text string) (apiv1.TaskEvent, error) {
	var e apiv1.TaskEvent
	err := tc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteSendTask, id), nil, apiv1.SendTaskRequest{Text: text}, &e)
	return e, err
}

// Stop interrupts the agent and stops the task.
func (tc TaskClient) Stop(ctx context.Context, id string) (apiv1.Task, error) {
	var t apiv1.Task
	err := tc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteStopTask, id), nil, nil, &t)
	return t, err
}

// Diff returns each cloned repository's changes against its base commit.
func (tc TaskClient) Diff(ctx context.Context, id string) (apiv1.TaskDiff, error) {
	var d apiv1.TaskDiff
	err := tc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteTaskDiff, id), nil, nil, &d)
	return d, err
}

// File streams a file (or a directory listing, as JSON) of the task's
// session into w; path is relative to the task's workdir. It reports
// whether path was a directory.
func (tc TaskClient) File(ctx context.Context, id, path string, w io.Writer) (isDir bool, err error) {
	resp, err := tc.c.send(ctx, http.MethodGet, routePath(apiv1.RouteTaskFiles, id), url.Values{"path": {path}}, nil, "", nil)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return resp.Header.Get("Content-Type") == "application/json", err
}

// Events calls fn with each event of task id after afterSeq, in order.
// Without follow it returns after the backlog. With follow it streams live
// events, reconnecting from the last seq seen when the stream drops, until
// the task is stopped or failed and every event was delivered, ctx ends, or
// fn returns an error (errors.Is(err, ErrStopFollowing) ends it cleanly).
func (tc TaskClient) Events(ctx context.Context, id string, afterSeq int64, follow bool, fn func(apiv1.TaskEvent) error) error {
	last, delay, failures := afterSeq, tc.c.backoff, 0
	for {
		n, err := tc.eventsOnce(ctx, id, &last, follow, fn)
		var fnErr callbackError
		switch {
		case errors.Is(err, ErrStopFollowing):
			return nil
		case errors.As(err, &fnErr):
			return fnErr.err
		case err != nil && !errors.Is(err, errStreamClosed):
			var ae *APIError
			if ctx.Err() != nil || errors.As(err, &ae) && ae.Code != CodeUnavailable && ae.Code != CodeInternal {
				return err
			}
		case !follow:
			return nil
		}
		if t, terr := tc.Get(ctx, id); terr == nil && (t.State == apiv1.TaskStopped || t.State == apiv1.TaskFailed) && t.EventSeq <= last {
			return nil
		}
		if n > 0 {
			failures, delay = 0, tc.c.backoff
		}
		if failures++; failures > tc.c.retries {
			return fmt.Errorf("follow events of task %s: gave up after %d reconnects: %w", id, tc.c.retries, err)
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

// ErrStopFollowing, returned by a TaskClient.Events callback, ends the stream
// without an error.
var ErrStopFollowing = errors.New("stop following")

// callbackError is a TaskClient.Events callback's error: it ends Events
// instead of counting as a dropped stream.
type callbackError struct{ err error }

func (e callbackError) Error() string { return e.err.Error() }
func (e callbackError) Unwrap() error { return e.err }

func (tc TaskClient) eventsOnce(ctx context.Context, id string, last *int64, follow bool, fn func(apiv1.TaskEvent) error) (int, error) {
	q := url.Values{"after": {strconv.FormatInt(*last, 10)}}
	if !follow {
		q.Set("follow", "false")
	}
	resp, err := tc.c.send(ctx, http.MethodGet, routePath(apiv1.RouteTaskEvents, id), q, nil, "",
		http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-cache"}})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n := 0
	err = readSSE(resp.Body, func(m sseMessage) error {
		if m.data == "" {
			return nil
		}
		var ev apiv1.TaskEvent
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			return fmt.Errorf("decode task event %q: %w", m.id, err)
		}
		if ev.Seq <= *last {
			return nil
		}
		if err := fn(ev); err != nil {
			return callbackError{err}
		}
		*last, n = ev.Seq, n+1
		return nil
	})
	if err == nil && follow {
		err = errStreamClosed
	}
	return n, err
}

// PR pushes a task's changes as a branch and opens a pull request of it
// through the GitHub integration.
func (tc TaskClient) PR(ctx context.Context, id string, req apiv1.TaskPRRequest) (apiv1.TaskPR, error) {
	var pr apiv1.TaskPR
	err := tc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteTaskPR, id), nil, req, &pr)
	return pr, err
}
