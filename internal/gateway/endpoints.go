package gateway

import (
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
)

// endpoint is one provider route the gateway forwards: a method and a path
// relative to the base URL, without an optional leading "v1/"; a trailing
// "/*" stands for one more non-empty segment.
type endpoint struct{ method, path string }

// providerEndpoints are, per credential kind, the endpoints the built-in
// harnesses call (claude: Messages, token counting, models; codex: the
// Responses API, its remote compaction, Chat Completions, models). Clients
// also probe the base URL itself (HEAD or GET, without a key).
var providerEndpoints = map[string][]endpoint{
	apiv1.SecretAnthropicAPIKey: {
		{http.MethodPost, "messages"}, {http.MethodPost, "messages/count_tokens"},
		{http.MethodGet, "models"}, {http.MethodGet, "models/*"},
		{http.MethodHead, ""}, {http.MethodGet, ""},
	},
	apiv1.SecretOpenAIAPIKey: {
		{http.MethodPost, "responses"}, {http.MethodPost, "responses/compact"}, {http.MethodPost, "chat/completions"},
		{http.MethodGet, "models"}, {http.MethodGet, "models/*"},
		{http.MethodHead, ""}, {http.MethodGet, ""},
	},
}

// providerEndpoint reports whether method rest (the path below the base
// URL; the query is not part of it) is one of kind's endpoints.
func providerEndpoint(kind, method, rest string) bool {
	p := strings.TrimPrefix(rest, "v1/")
	if rest == "v1" {
		p = ""
	}
	for _, e := range providerEndpoints[kind] {
		if e.method != method {
			continue
		}
		if base, ok := strings.CutSuffix(e.path, "/*"); ok {
			if seg, ok := strings.CutPrefix(p, base+"/"); ok && seg != "" && !strings.Contains(seg, "/") {
				return true
			}
		} else if p == e.path {
			return true
		}
	}
	return false
}

// endpointList names kind's endpoints for a refusal.
func endpointList(kind string) string {
	var out []string
	for _, e := range providerEndpoints[kind] {
		if e.path != "" {
			out = append(out, e.method+" "+e.path)
		}
	}
	return strings.Join(out, ", ")
}

// checkProvider refuses a base URL whose host is an address the server
// does not reach, before anything is sent (names are judged when dialled).
func (c *Gateway) checkProvider(base *url.URL) error {
	port := uint16(443)
	if base.Scheme == "http" {
		port = 80
	}
	if p := base.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return &net.AddrError{Err: "bad port", Addr: base.Host}
		}
		port = uint16(n)
	}
	return c.providers.CheckHost(base.Hostname(), port)
}
