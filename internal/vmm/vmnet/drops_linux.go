package vmnet

import (
	"encoding/binary"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The namespace's drop log: the rules log every packet they drop to NFLOG
// group dropGroup (groups are per namespace), copying its first
// dropSnaplen bytes: an IPv6 header, a few extension headers and an
// ICMPv6 neighbour solicitation's target fit.
const (
	dropGroup   = 1
	dropSnaplen = 160
	// dropBatch and dropFlushCentis let the kernel send up to dropBatch
	// packets in one message, at most dropFlushCentis hundredths of a
	// second after the first: a flood costs messages, not one each.
	dropBatch       = 32
	dropFlushCentis = 10
	// dropReadBuffer is the socket's receive buffer; what does not fit
	// is lost, and counted from the log's sequence numbers.
	dropReadBuffer = 1 << 20
)

// NFLOG configuration (linux/netfilter/nfnetlink_log.h).
const (
	nfulaCfgCmd       = 1
	nfulaCfgMode      = 2
	nfulaCfgTimeout   = 4
	nfulaCfgQThresh   = 5
	nfulaCfgFlags     = 6
	nfulnlCfgCmdBind  = 1
	nfulnlCopyPacket  = 2
	nfulnlCfgFlagSeq  = 1
	nfnetlinkVersion0 = 0
)

// DropLog reads the packets a machine's rules drop, inside its namespace.
// One goroutine reads it; Close (or the Net's) ends a Read.
type DropLog struct {
	c       *netlink.Conn
	next    uint32 // the sequence number the next logged packet should have
	started bool
}

// Drops opens the machine's drop log: a netlink socket in its namespace
// bound to the rules' NFLOG group. There is one per namespace (a second
// is refused by the kernel while the first is open); the Net's Close
// closes it too.
func (n *Net) Drops() (*DropLog, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, fmt.Errorf("open drop log: %w", ErrClosed)
	}
	var c *netlink.Conn
	err := n.ns.in(func() error {
		var err error
		c, err = netlink.Dial(unix.NETLINK_NETFILTER, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open drop log: %w", err)
	}
	if err := bindDropLog(c); err != nil {
		c.Close()
		return nil, fmt.Errorf("open drop log: %w", err)
	}
	n.sockets = append(n.sockets, c)
	return &DropLog{c: c}, nil
}

// bindDropLog binds c to dropGroup, copying packets with sequence numbers,
// in batches.
func bindDropLog(c *netlink.Conn) error {
	_ = c.SetReadBuffer(dropReadBuffer) // best effort: the kernel caps it at rmem_max
	if err := c.SetOption(netlink.NoENOBUFS, true); err != nil {
		return fmt.Errorf("drop log socket: %w", err)
	}
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.Bytes(nfulaCfgCmd, []byte{nfulnlCfgCmdBind})
	mode := binary.BigEndian.AppendUint32(nil, dropSnaplen)
	ae.Bytes(nfulaCfgMode, append(mode, nfulnlCopyPacket, 0))
	ae.Uint32(nfulaCfgTimeout, dropFlushCentis)
	ae.Uint32(nfulaCfgQThresh, dropBatch)
	ae.Uint16(nfulaCfgFlags, nfulnlCfgFlagSeq)
	attrs, err := ae.Encode()
	if err != nil {
		return fmt.Errorf("bind NFLOG group %d: %w", dropGroup, err)
	}
	hdr := []byte{unix.AF_UNSPEC, nfnetlinkVersion0, 0, 0}
	binary.BigEndian.PutUint16(hdr[2:], dropGroup)
	_, err = c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfulnlMsgConfig), Flags: netlink.Request | netlink.Acknowledge},
		Data:   append(hdr, attrs...),
	})
	if err != nil {
		return fmt.Errorf("bind NFLOG group %d: %w", dropGroup, err)
	}
	return nil
}

// Read waits for the next batch of dropped packets and returns them,
// decoded (a packet that is not IPv4 or IPv6 is left out), with how many
// the kernel logged but could not hand over since the last batch (gaps in
// the log's sequence numbers). It fails once the log is closed.
func (l *DropLog) Read() ([]Drop, int64, error) {
	msgs, err := l.c.Receive()
	if err != nil {
		return nil, 0, fmt.Errorf("read dropped packets: %w", err)
	}
	var out []Drop
	var lost int64
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(nfulnlMsgPacket) {
			continue
		}
		payload, seq, hasSeq, err := decodeLogMessage(m.Data)
		if err != nil {
			continue
		}
		if hasSeq {
			lost += l.gap(seq)
		}
		if d, ok := decodePacket(payload); ok {
			out = append(out, d)
		}
	}
	return out, lost, nil
}

// gap is how many sequence numbers were skipped before seq.
func (l *DropLog) gap(seq uint32) int64 {
	var n int64
	if l.started {
		if d := seq - l.next; d < 1<<31 { // a wrap ahead, not a step back
			n = int64(d)
		}
	}
	l.next, l.started = seq+1, true
	return n
}

// Close closes the log; a Read waiting returns an error.
func (l *DropLog) Close() error { return l.c.Close() }
