package vmnet

import (
	"fmt"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tableName is the one nftables table in every machine's namespace.
const tableName = "engrams"

// ipsDstNAT is IPS_DST_NAT of conntrack's status bits.
const ipsDstNAT = 1 << 5

// nfInetIngress is NF_INET_INGRESS: an inet chain on one device's ingress
// (Linux 5.10), which sees IPv6 that the TAP, with IPv6 disabled, would
// otherwise drop before prerouting.
const nfInetIngress = 5

// installRules writes the namespace's whole rule set in one transaction:
//
//	table inet engrams {
//	  chain ingress { type filter hook ingress device tap0 priority filter; policy accept;
//	    meta nfproto ipv6 log group 1 snaplen 160 drop }
//	  chain guard { type filter hook prerouting priority mangle; policy accept;
//	    iif tap0 meta nfproto ipv4 meta l4proto tcp accept
//	    iif tap0 meta nfproto ipv4 udp dport 53 accept
//	    iif tap0 log group 1 snaplen 160 drop } # ICMP, other UDP (QUIC, NTP), other protocols
//	  chain nat { type nat hook prerouting priority dstnat;
//	    iif tap0 meta nfproto ipv4 udp dport 53 redirect to :resolver
//	    iif tap0 meta nfproto ipv4 tcp dport 53 redirect to :resolver
//	    iif tap0 meta nfproto ipv4 meta l4proto tcp redirect to :proxy }
//	  chain input { type filter hook input priority filter; policy drop;
//	    ct status dnat accept }                 # only what the redirects sent
//	  chain forward { type filter hook forward priority filter; policy drop; }
//	}
//
// Every packet dropped is first logged to the namespace's NFLOG group
// (dropGroup, the first dropSnaplen bytes), where Drops reads it. The
// namespace has no other interface and no route out, so even a wrong rule
// here reaches nothing beyond the namespace.
func installRules(nsFD, tapIndex int, proxyPort, resolverPort uint16) error {
	c, err := nftables.New(nftables.WithNetNSFd(nsFD))
	if err != nil {
		return fmt.Errorf("install nftables rules: %w", err)
	}
	c.FlushRuleset()
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: tableName})
	accept, drop := nftables.ChainPolicyAccept, nftables.ChainPolicyDrop
	ingress := c.AddChain(&nftables.Chain{Name: "ingress", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookRef(nfInetIngress), Priority: nftables.ChainPriorityFilter, Device: TapName, Policy: &accept})
	guard := c.AddChain(&nftables.Chain{Name: "guard", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityMangle, Policy: &accept})
	nat := c.AddChain(&nftables.Chain{Name: "nat", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accept})
	input := c.AddChain(&nftables.Chain{Name: "input", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &drop})
	c.AddChain(&nftables.Chain{Name: "forward", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &drop})

	fromTap := matchIIF(tapIndex)
	ipv4 := matchMeta(expr.MetaKeyNFPROTO, unix.NFPROTO_IPV4)
	tcp := matchMeta(expr.MetaKeyL4PROTO, unix.IPPROTO_TCP)
	udp := matchMeta(expr.MetaKeyL4PROTO, unix.IPPROTO_UDP)
	dport53 := matchDport(53)
	ipv6 := matchMeta(expr.MetaKeyNFPROTO, unix.NFPROTO_IPV6)
	rules := []struct {
		chain *nftables.Chain
		exprs [][]expr.Any
	}{
		{ingress, [][]expr.Any{ipv6, logDrop(), verdict(expr.VerdictDrop)}},
		{guard, [][]expr.Any{fromTap, ipv4, tcp, verdict(expr.VerdictAccept)}},
		{guard, [][]expr.Any{fromTap, ipv4, udp, dport53, verdict(expr.VerdictAccept)}},
		{guard, [][]expr.Any{fromTap, logDrop(), verdict(expr.VerdictDrop)}},
		{nat, [][]expr.Any{fromTap, ipv4, udp, dport53, redirect(resolverPort)}},
		{nat, [][]expr.Any{fromTap, ipv4, tcp, dport53, redirect(resolverPort)}},
		{nat, [][]expr.Any{fromTap, ipv4, tcp, redirect(proxyPort)}},
		{input, [][]expr.Any{matchDstNAT(), verdict(expr.VerdictAccept)}},
	}
	for _, r := range rules {
		var e []expr.Any
		for _, part := range r.exprs {
			e = append(e, part...)
		}
		c.AddRule(&nftables.Rule{Table: t, Chain: r.chain, Exprs: e})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("install nftables rules: %w", err)
	}
	return nil
}

func matchIIF(index int) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIF, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(uint32(index))},
	}
}

func matchMeta(key expr.MetaKey, v byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{v}},
	}
}

// matchDport matches the transport header's destination port (TCP and
// UDP both keep it at offset 2).
func matchDport(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

func matchDstNAT() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATUS, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(ipsDstNAT), Xor: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// redirect DNATs to port on the address of the interface the packet came
// in on (HostAddr).
func redirect(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Redir{RegisterProtoMin: 1},
	}
}

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }

// logDrop hands the packet's first dropSnaplen bytes to the namespace's
// NFLOG group before it is dropped.
func logDrop() []expr.Any {
	return []expr.Any{&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_SNAPLEN, Group: dropGroup, Snaplen: dropSnaplen}}
}
