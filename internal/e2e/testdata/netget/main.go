// Command netget runs in a guest and tries one way out, printing what it
// got and exiting 0 only if it got through: `netget http URL` (GET, the
// body printed), `netget tcp HOST:PORT`, `netget udp HOST:PORT` (a
// datagram, then waits for any answer), `netget lookup NAME`. It resolves
// with /etc/resolv.conf. NETGET_AUTH, when set, is the http request's
// Authorization. Two more set the stage as a guest's root could:
// `netget v6 [NEIGHBOUR]` gives eth0 an IPv6 address (2001:db8:1::2/64)
// and a default route, and NEIGHBOUR, if named, a permanent neighbour
// entry at the gateway's MAC (so packets to it leave without a neighbour
// solicitation); `netget pings N A.B` sends one ICMP echo request to each
// of N addresses A.B.x.y at once. Built by the e2e tests; never shipped.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) < 2 || len(os.Args) > 4 {
		fmt.Fprintln(os.Stderr, "usage: netget http|tcp|udp|lookup TARGET | v6 [NEIGHBOUR] | pings N A.B")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "v6":
		err = setupV6(os.Args[2:])
	case "pings":
		err = pings(os.Args[2:])
	default:
		err = try(ctx, os.Args[1], os.Args[2])
	}
	if err != nil {
		fmt.Println("failed:", err)
		os.Exit(1)
	}
}

func try(ctx context.Context, how, target string) error {
	r := &net.Resolver{PreferGo: true}
	d := &net.Dialer{Resolver: r}
	switch how {
	case "http":
		tr := &http.Transport{DialContext: d.DialContext, Proxy: nil}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return err
		}
		if auth := os.Getenv("NETGET_AUTH"); auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		fmt.Printf("%d %s", resp.StatusCode, b)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	case "tcp":
		c, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return err
		}
		defer c.Close()
		// A connection the proxy takes and then refuses ends without a byte.
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		fmt.Fprintf(c, "SSH-2.0-netget\r\n")
		b := make([]byte, 64)
		n, err := c.Read(b)
		if n == 0 {
			return fmt.Errorf("connected, then nothing: %v", err)
		}
		fmt.Printf("%q\n", b[:n])
		return nil
	case "udp":
		c, err := d.DialContext(ctx, "udp", target)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 64)
		n, err := c.Read(b)
		if err != nil {
			return err
		}
		fmt.Printf("%q\n", b[:n])
		return nil
	case "lookup":
		addrs, err := r.LookupHost(ctx, target)
		if err != nil {
			return err
		}
		fmt.Println(addrs)
		return nil
	}
	return fmt.Errorf("unknown %q", how)
}
