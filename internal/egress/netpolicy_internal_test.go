package egress

import "github.com/engrams/engrams/internal/netpolicy"

// The address policy satisfies the interfaces the resolver and proxy
// declare.
var (
	_ Names  = (*netpolicy.Policy)(nil)
	_ Dialer = (*netpolicy.Guard)(nil)
	_ Addrs  = (*netpolicy.Guard)(nil)
)
