package netpolicy

import (
	"net/netip"
	"strings"
	"testing"
)

func TestBlockedRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr string
		want string // a part of the reason; "" means not blocked
	}{
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", `"this network" 0.0.0.0/8`},
		{"10.0.0.0", "private 10.0.0.0/8"},
		{"10.255.255.255", "private 10.0.0.0/8"},
		{"100.64.0.1", "CGNAT"},
		{"100.127.255.255", "CGNAT"},
		{"127.0.0.1", "loopback 127.0.0.0/8"},
		{"127.255.255.254", "loopback"},
		{"169.254.169.254", "link-local"},
		{"172.16.0.1", "private 172.16.0.0/12"},
		{"172.31.255.255", "private 172.16.0.0/12"},
		{"192.0.0.8", "192.0.0.0/24"},
		{"192.168.1.1", "private 192.168.0.0/16"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.255", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "broadcast"},
		{"::", "unspecified"},
		{"::1", "loopback ::1/128"},
		{"::7f00:1", "IPv4-compatible"},
		{"fe80::1", "link-local fe80::/10"},
		{"fe80::1%eth0", "link-local"},
		{"fc00::1", "unique local"},
		{"fd12:3456::1", "unique local"},
		{"fec0::1", "site-local"},
		{"ff02::1", "multicast"},
		{"64:ff9b:1::a00:1", "local-use NAT64"},
		{"::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, loopback"},
		{"::ffff:10.1.2.3", "IPv4-mapped form of 10.1.2.3, private"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"::ffff:0:127.0.0.1", "SIIT"},
		{"64:ff9b::7f00:1", "NAT64 form of 127.0.0.1"},
		{"64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254"},
		{"2002:7f00:1::1", "6to4 form of 127.0.0.1"},
		{"2002:c0a8:101::", "6to4 form of 192.168.1.1"},
		{"2001:0:4136:e378:8000:63bf:80ff:fffe", "Teredo form of 127.0.0.1"},
		// public
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"100.63.255.255", ""},
		{"100.128.0.0", ""},
		{"172.15.255.255", ""},
		{"172.32.0.0", ""},
		{"192.169.0.1", ""},
		{"198.20.0.1", ""},
		{"223.255.255.255", ""},
		{"2606:4700::1111", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""},
		{"2002:808:808::1", ""},
		{"2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			reason, blocked := BlockedRange(netip.MustParseAddr(tt.addr))
			if blocked != (tt.want != "") || !strings.Contains(reason, tt.want) {
				t.Errorf("BlockedRange(%s) = %q, %v; want blocked %v with %q", tt.addr, reason, blocked, tt.want != "", tt.want)
			}
		})
	}
	if _, blocked := BlockedRange(netip.Addr{}); !blocked {
		t.Error("the zero Addr is not blocked")
	}
}
