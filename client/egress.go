package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// EgressQuery picks one page of a session's egress log.
type EgressQuery struct {
	// Ascending reads the events after After, oldest first (following
	// the log); otherwise those before Before (0: from the newest),
	// newest first.
	Ascending bool
	After     int64
	Before    int64
	Limit     int // 1 to apiv1.MaxEgressPage; 0: the server's default (100)
}

// Egress reads one page of a session's egress log: every DNS query,
// connection and dropped flow of its guest and what the platform decided. Host and
// Reason may quote the guest: treat them as untrusted text.
func (sc SessionClient) Egress(ctx context.Context, id string, q EgressQuery) (apiv1.EgressList, error) {
	v := url.Values{}
	switch {
	case q.Ascending:
		v.Set("after", strconv.FormatInt(q.After, 10))
	case q.Before > 0:
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	var l apiv1.EgressList
	err := sc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteEgress, id), v, nil, &l)
	return l, err
}

// FollowEgress calls fn with each event of a session's egress log after
// seq after, oldest first, as they arrive: it reads full pages at once and
// polls every interval (default 1s) when caught up. It returns nil once
// the session has ended and every event was passed, fn's error, or ctx's
// (wrapped). Transient failures are retried as WaitJob does.
func (sc SessionClient) FollowEgress(ctx context.Context, id string, after int64, interval time.Duration, fn func(apiv1.EgressEvent) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	failures := 0
	ended := false // the session had ended before the last read
	for {
		l, err := sc.Egress(ctx, id, EgressQuery{Ascending: true, After: after, Limit: apiv1.MaxEgressPage})
		switch {
		case err == nil:
			failures = 0
			for _, e := range l.Events {
				if err := fn(e); err != nil {
					return err
				}
				after = e.Seq
			}
			if len(l.Events) == apiv1.MaxEgressPage {
				continue
			}
			if len(l.Events) == 0 && ended {
				return nil
			}
			if len(l.Events) == 0 {
				// Read once more after seeing it ended: events sent
				// before the end may have landed after this read.
				s, err := sc.Get(ctx, id)
				if ended = err == nil && (s.State == "completed" || s.State == "dead"); ended {
					continue
				}
			}
		case ctx.Err() != nil:
			return fmt.Errorf("follow egress of session %s: %w", id, ctx.Err())
		case !transient(err) || failures >= waitRetries:
			return fmt.Errorf("follow egress of session %s: %w", id, err)
		default:
			failures++
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("follow egress of session %s: %w", id, ctx.Err())
		case <-time.After(interval):
		}
	}
}
