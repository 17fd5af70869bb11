package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// ImageClient calls the image and image job routes. Client.Images returns
// one.
type ImageClient struct{ c *Client }

// Images returns the client of the image routes.
func (c *Client) Images() ImageClient { return ImageClient{c} }

// Enable enables an OCI image and returns at once with the image and
// its job (pending, or ready when the image was enabled before); follow the
// job with WaitJob. req.Credentials are sent once, stored sealed by
// the server and never returned.
func (ic ImageClient) Enable(ctx context.Context, req apiv1.EnableImageRequest) (apiv1.ImageJobResponse, error) {
	var r apiv1.ImageJobResponse
	err := ic.c.call(ctx, http.MethodPost, routePath(apiv1.RouteEnableImage, ""), nil, req, &r)
	return r, err
}

// List lists images by name; disabled ones too when all is set.
func (ic ImageClient) List(ctx context.Context, all bool) ([]apiv1.Image, error) {
	var q url.Values
	if all {
		q = url.Values{"all": {"true"}}
	}
	return listAll(ctx, ic.c, routePath(apiv1.RouteListImages, ""), q, func(l apiv1.ImageList) ([]apiv1.Image, string) { return l.Items, l.NextCursor })
}

// Get returns the enabled image with that name (or id).
func (ic ImageClient) Get(ctx context.Context, name string) (apiv1.Image, error) {
	var img apiv1.Image
	err := ic.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetImage, name), nil, nil, &img)
	return img, err
}

// Disable disables an image: no new session starts from it, sessions
// already running keep theirs, and its name is free again.
func (ic ImageClient) Disable(ctx context.Context, name string) (apiv1.Image, error) {
	var img apiv1.Image
	err := ic.c.call(ctx, http.MethodDelete, routePath(apiv1.RouteDisableImage, name), nil, nil, &img)
	return img, err
}

// Refresh re-pulls an image's tag and enables the digest it names now;
// the image serves its current base snapshot until the new one is ready.
func (ic ImageClient) Refresh(ctx context.Context, name string) (apiv1.ImageJobResponse, error) {
	var r apiv1.ImageJobResponse
	err := ic.c.call(ctx, http.MethodPost, routePath(apiv1.RouteRefreshImage, name), nil, nil, &r)
	return r, err
}

// Jobs lists an image's enable and refresh jobs, oldest first.
func (ic ImageClient) Jobs(ctx context.Context, name string) ([]apiv1.ImageJob, error) {
	return listAll(ctx, ic.c, routePath(apiv1.RouteImageJobs, name), nil, func(l apiv1.ImageJobList) ([]apiv1.ImageJob, string) { return l.Items, l.NextCursor })
}

// GetJob returns one image job with its progress.
func (ic ImageClient) GetJob(ctx context.Context, id string) (apiv1.ImageJob, error) {
	var j apiv1.ImageJob
	err := ic.c.call(ctx, http.MethodGet, routePath(apiv1.RouteGetImageJob, id), nil, nil, &j)
	return j, err
}

// waitRetries is how many polls in a row WaitJob lets fail for
// reasons that pass (server unreachable or busy) before it gives up.
const waitRetries = 10

// ImageJobDone reports whether an image job has ended (ready or failed).
func ImageJobDone(j apiv1.ImageJob) bool {
	return j.State == apiv1.ImageJobReady || j.State == apiv1.ImageJobFailed
}

// WaitJob polls image job id every interval (default 1s) until it is
// ready or failed, calling onProgress (if set) with the job after every
// poll, and returns the job as it ended. A failed job is not an error:
// check its State, Error and OutputTail. Polls failing because the server
// is unreachable or busy are retried, up to 10 in a row; on an error the
// job is returned as last seen.
func (ic ImageClient) WaitJob(ctx context.Context, id string, interval time.Duration, onProgress func(apiv1.ImageJob)) (apiv1.ImageJob, error) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last apiv1.ImageJob
	failures := 0
	for {
		j, err := ic.GetJob(ctx, id)
		switch {
		case err == nil:
			last, failures = j, 0
			if onProgress != nil {
				onProgress(j)
			}
			if ImageJobDone(j) {
				return j, nil
			}
		case ctx.Err() != nil:
			return last, fmt.Errorf("wait for image job %s: %w", id, ctx.Err())
		case !transient(err) || failures >= waitRetries:
			return last, fmt.Errorf("wait for image job %s: %w", id, err)
		default:
			failures++
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("wait for image job %s: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

// transient reports whether a failed call may succeed when repeated: the
// server was unreachable, busy, or the connection broke.
func transient(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Code == CodeUnavailable || ae.Code == CodeTimeout
	}
	var unreachable *UnreachableError
	var netErr net.Error // *url.Error from the transport is one
	return errors.As(err, &unreachable) || errors.As(err, &netErr) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}
