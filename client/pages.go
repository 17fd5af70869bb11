package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/engrams/engrams/api/apiv1"
)

// maxListPages bounds how many pages one List follows.
const maxListPages = 1000

// listAll reads every page of a list route (apiv1.MaxPageLimit at a time,
// following NextCursor) and returns the items in the list's order.
func listAll[T, L any](ctx context.Context, c *Client, path string, q url.Values, pick func(L) ([]T, string)) ([]T, error) {
	qs := url.Values{}
	for k, v := range q {
		qs[k] = v
	}
	qs.Set("limit", strconv.Itoa(apiv1.MaxPageLimit))
	var out []T
	for range maxListPages {
		var l L
		if err := c.call(ctx, http.MethodGet, path, qs, nil, &l); err != nil {
			return out, err
		}
		items, next := pick(l)
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		qs.Set("cursor", next)
	}
	return out, fmt.Errorf("list %s: more than %d pages", path, maxListPages)
}
