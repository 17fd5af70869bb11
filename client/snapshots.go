package client

import (
	"context"
	"net/http"

	"github.com/engrams/engrams/api/apiv1"
)

// Suspend snapshots session id and frees its host. With wait it returns
// when the session has settled (normally idle; active again, with a reason,
// when the snapshot failed); without, at once. Suspending an idle session
// changes nothing; other states than active are a conflict.
func (sc SessionClient) Suspend(ctx context.Context, id string, wait bool) (apiv1.Session, error) {
	var s apiv1.Session
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteSuspend, id), waitQuery(wait), nil, &s)
	return s, err
}

// Resume restores an idle session's head snapshot, on any compatible host,
// and returns it once active. Exec, file, outbox and followed event
// requests resume an idle session by themselves.
func (sc SessionClient) Resume(ctx context.Context, id string) (apiv1.Session, error) {
	var s apiv1.Session
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteResume, id), nil, nil, &s)
	return s, err
}

// Snapshot snapshots a running session, keeping it running, and returns
// the committed snapshot (now the session's head).
func (sc SessionClient) Snapshot(ctx context.Context, id string) (apiv1.Snapshot, error) {
	var sn apiv1.Snapshot
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteSnapshot, id), nil, nil, &sn)
	return sn, err
}

// PutOutbox records a command for session id; the coordinator applies it
// exactly once, in order, resuming the session if needed. Sending the same
// req.ID again returns the existing item.
func (sc SessionClient) PutOutbox(ctx context.Context, id string, req apiv1.OutboxRequest) (apiv1.OutboxItem, error) {
	var it apiv1.OutboxItem
	err := sc.c.call(ctx, http.MethodPost, routePath(apiv1.RouteOutboxPut, id), nil, req, &it)
	return it, err
}

// ListOutbox lists session id's outbox items in order of application.
func (sc SessionClient) ListOutbox(ctx context.Context, id string) ([]apiv1.OutboxItem, error) {
	var l apiv1.OutboxList
	err := sc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteOutboxList, id), nil, nil, &l)
	return l.Items, err
}
