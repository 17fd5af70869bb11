package gateway

import (
	"net"
	"net/url"
	"strconv"
)

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
