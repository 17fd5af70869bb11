package client

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
)

// FileClient calls the file routes of a session. Client.Files returns one.
type FileClient struct{ c *Client }

// Files returns the client of the session file routes.
func (c *Client) Files() FileClient { return FileClient{c} }

// Get downloads path from session id into w.
func (fc FileClient) Get(ctx context.Context, id, path string, w io.Writer) error {
	resp, err := fc.c.send(ctx, http.MethodGet, routePath(apiv1.RouteFileGet, id), url.Values{"path": {path}}, nil, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("download %s: %w", path, err)
	}
	return nil
}

// Put uploads r to path in session id. A zero mode leaves the server's
// default (0644).
func (fc FileClient) Put(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error {
	q := url.Values{"path": {path}}
	if mode != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(mode.Perm()), 8))
	}
	resp, err := fc.c.send(ctx, http.MethodPut, routePath(apiv1.RouteFilePut, id), q, r, "application/octet-stream", nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// List lists the directory path in session id.
func (fc FileClient) List(ctx context.Context, id, path string) ([]apiv1.FileInfo, error) {
	var l []apiv1.FileInfo
	err := fc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteFileList, id), url.Values{"path": {path}}, nil, &l)
	return l, err
}

// Stat describes path in session id.
func (fc FileClient) Stat(ctx context.Context, id, path string) (apiv1.FileInfo, error) {
	var fi apiv1.FileInfo
	err := fc.c.call(ctx, http.MethodGet, routePath(apiv1.RouteFileStat, id), url.Values{"path": {path}}, nil, &fi)
	return fi, err
}
