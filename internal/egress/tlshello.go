package egress

import (
	"bufio"
	"encoding/binary"
	"errors"

	"golang.org/x/crypto/cryptobyte"
)

// maxPeekBytes bounds what the proxy reads of a connection before it
// knows where it goes: a ClientHello, over one or more records (16 KiB).
const maxPeekBytes = 16 << 10

// ClientHello refusals.
var (
	errNotTLS         = errors.New("not a TLS handshake")
	errNotHello       = errors.New("the first handshake message is not a ClientHello")
	errHelloTooLarge  = errors.New("ClientHello over 16 KiB")
	errHelloMalformed = errors.New("malformed ClientHello")
	errNoSNI          = errors.New("ClientHello without a server name")
	errBadSNI         = errors.New("ClientHello server name is not a host name")
	errECH            = errors.New("encrypted ClientHello (its inner server name cannot be checked)")
)

// TLS wire constants.
const (
	recordHandshake    = 0x16
	recordAlert        = 0x15
	handshakeHello     = 1
	maxRecordBytes     = 1 << 14
	extServerName      = 0
	extECH             = 0xfe0d
	nameTypeHostName   = 0
	alertAccessDenied  = 49
	alertInternalError = 80
)

// clientHello is what the proxy needs of a ClientHello.
type clientHello struct {
	sni  string // normalized; "" when the hello names none
	sent string // the name as the guest sent it (case kept), for the log; set even when refused as no host name
}

// peekClientHello reads the ClientHello at the start of br without
// consuming it (the bytes stay buffered, to be forwarded), reassembling
// it from as many handshake records as it spans within br's buffer
// (maxPeekBytes). It returns the server name the hello carries, or why
// the connection cannot be passed through.
func peekClientHello(br *bufio.Reader) (clientHello, error) {
	var msg []byte
	off := 0
	for {
		hdr, err := br.Peek(off + 5)
		if err != nil {
			return clientHello{}, peekErr(err)
		}
		h := hdr[off:]
		if h[0] != recordHandshake {
			if off == 0 {
				return clientHello{}, errNotTLS
			}
			return clientHello{}, errHelloMalformed
		}
		n := int(binary.BigEndian.Uint16(h[3:5]))
		if h[1] != 3 || n == 0 || n > maxRecordBytes {
			return clientHello{}, errHelloMalformed
		}
		rec, err := br.Peek(off + 5 + n)
		if err != nil {
			return clientHello{}, peekErr(err)
		}
		msg = append(msg, rec[off+5:]...)
		off += 5 + n
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeHello {
			return clientHello{}, errNotHello
		}
		need := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])) // header and body
		if need > maxPeekBytes {
			return clientHello{}, errHelloTooLarge
		}
		if len(msg) >= need {
			return parseClientHello(msg[:need])
		}
	}
}

// peekErr maps a Peek failure: a hello larger than the buffer, or the
// connection's error (EOF, a deadline).
func peekErr(err error) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return errHelloTooLarge
	}
	return err
}

// parseClientHello parses a ClientHello handshake message (its 4-byte
// header included) for its server name. It refuses duplicate extensions
// and more than one host name (no two parsers can read a different name
// from it), server names that are not host names, and ECH.
func parseClientHello(msg []byte) (clientHello, error) {
	if len(msg) < 4 || msg[0] != handshakeHello {
		return clientHello{}, errNotHello
	}
	s := cryptobyte.String(msg[4:])
	var vers uint16
	var sessionID, ciphers, compression, exts cryptobyte.String
	if !s.ReadUint16(&vers) || !s.Skip(32) ||
		!s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32 ||
		!s.ReadUint16LengthPrefixed(&ciphers) || len(ciphers) == 0 || len(ciphers)%2 != 0 ||
		!s.ReadUint8LengthPrefixed(&compression) || len(compression) == 0 {
		return clientHello{}, errHelloMalformed
	}
	if s.Empty() {
		return clientHello{}, errNoSNI
	}
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return clientHello{}, errHelloMalformed
	}
	var hello clientHello
	seen := map[uint16]bool{}
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) || seen[typ] {
			return clientHello{}, errHelloMalformed
		}
		seen[typ] = true
		switch typ {
		case extECH:
			return clientHello{}, errECH
		case extServerName:
			sni, sent, err := parseServerName(data)
			if err != nil {
				return clientHello{sent: sent}, err
			}
			hello.sni, hello.sent = sni, sent
		}
	}
	if hello.sni == "" {
		return clientHello{}, errNoSNI
	}
	return hello, nil
}

// parseServerName parses a server_name extension's body: exactly one
// host_name, a host name (not an IP literal). It returns the name
// normalized and as sent (the latter also with errBadSNI).
func parseServerName(data cryptobyte.String) (sni, sent string, err error) {
	var list cryptobyte.String
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() || list.Empty() {
		return "", "", errHelloMalformed
	}
	for !list.Empty() {
		var typ uint8
		var name cryptobyte.String
		if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&name) {
			return "", "", errHelloMalformed
		}
		if typ != nameTypeHostName {
			continue
		}
		if sni != "" {
			return "", "", errHelloMalformed
		}
		n, ok := hostName(string(name))
		if !ok || len(name) == 0 || name[len(name)-1] == '.' {
			return "", string(name), errBadSNI
		}
		sni, sent = n, string(name)
	}
	if sni == "" {
		return "", "", errNoSNI
	}
	return sni, sent, nil
}
