package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/cryptobyte"
)

// captureHello is the first flight crypto/tls sends for cfg: its
// ClientHello records.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c1, cfg).Handshake()
	}()
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(c2, hdr); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, binary.BigEndian.Uint16(hdr[3:]))
	if _, err := io.ReadFull(c2, body); err != nil {
		t.Fatal(err)
	}
	c2.Close()
	<-done
	return append(hdr, body...)
}

// refragment splits a single-record hello into records of at most n
// bytes of handshake data each.
func refragment(rec []byte, n int) []byte {
	var out []byte
	for data := rec[5:]; len(data) > 0; {
		k := min(n, len(data))
		out = append(out, recordHandshake, 3, 1, byte(k>>8), byte(k))
		out = append(out, data[:k]...)
		data = data[k:]
	}
	return out
}

// buildHello is a ClientHello record with the given extensions (type,
// body); none at all when exts is nil.
func buildHello(exts [][2][]byte) []byte {
	var b cryptobyte.Builder
	b.AddUint8(handshakeHello)
	b.AddUint24LengthPrefixed(func(b *cryptobyte.Builder) {
		b.AddUint16(0x0303)
		b.AddBytes(make([]byte, 32))
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) {})
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint16(0x1301) })
		b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddUint8(0) })
		if exts == nil {
			return
		}
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range exts {
				b.AddBytes(e[0])
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e[1]) })
			}
		})
	})
	msg := b.BytesOrPanic()
	return append([]byte{recordHandshake, 3, 1, byte(len(msg) >> 8), byte(len(msg))}, msg...)
}

// sniExt is a server_name extension naming names (host_name entries).
func sniExt(names ...string) [2][]byte {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, n := range names {
			b.AddUint8(nameTypeHostName)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(n)) })
		}
	})
	return [2][]byte{{0, 0}, b.BytesOrPanic()}
}

func peekBytes(data []byte) (clientHello, error) {
	return peekClientHello(bufio.NewReaderSize(bytes.NewReader(data), maxPeekBytes))
}

func TestPeekClientHello(t *testing.T) {
	t.Parallel()
	real13 := captureHello(t, &tls.Config{ServerName: "Registry.Example.com"})
	real12 := captureHello(t, &tls.Config{ServerName: "a.test", MaxVersion: tls.VersionTLS12})
	ech := [2][]byte{{0xfe, 0x0d}, {1, 2, 3}}
	huge := bytes.Repeat(append([]byte{recordHandshake, 3, 1, 0x40, 0}, make([]byte, 1<<14)...), 2)
	huge[5] = handshakeHello
	for _, tc := range []struct {
		name string
		data []byte
		sni  string
		err  error
	}{
		{"crypto/tls TLS 1.3 hello", real13, "registry.example.com", nil},
		{"crypto/tls TLS 1.2 hello", real12, "a.test", nil},
		{"split over 40-byte records", refragment(real13, 40), "registry.example.com", nil},
		{"split over 1-byte records", refragment(real12, 1), "a.test", nil},
		{"built", buildHello([][2][]byte{sniExt("x.test")}), "x.test", nil},
		{"no extensions", buildHello(nil), "", errNoSNI},
		{"no server name", buildHello([][2][]byte{{{0, 10}, {0, 2, 0, 29}}}), "", errNoSNI},
		{"an IP literal", buildHello([][2][]byte{sniExt("10.0.0.5")}), "", errBadSNI},
		{"a trailing dot", buildHello([][2][]byte{sniExt("x.test.")}), "", errBadSNI},
		{"a NUL in the name", buildHello([][2][]byte{sniExt("x.test\x00.evil")}), "", errBadSNI},
		{"two host names", buildHello([][2][]byte{sniExt("x.test", "y.test")}), "", errHelloMalformed},
		{"two server_name extensions", buildHello([][2][]byte{sniExt("x.test"), sniExt("y.test")}), "", errHelloMalformed},
		{"ECH", buildHello([][2][]byte{sniExt("public.test"), ech}), "", errECH},
		{"not TLS", []byte("GET / HTTP/1.1\r\n\r\n"), "", errNotTLS},
		{"an alert first", []byte{recordAlert, 3, 3, 0, 2, 2, 40}, "", errNotTLS},
		{"a 0-byte record", []byte{recordHandshake, 3, 1, 0, 0}, "", errHelloMalformed},
		{"over 16 KiB", huge, "", errHelloTooLarge},
		{"truncated", real13[:100], "", io.EOF},
	} {
		got, err := peekBytes(tc.data)
		if got.sni != tc.sni || !errors.Is(err, tc.err) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got.sni, err, tc.sni, tc.err)
		}
	}
}

func TestPeekClientHelloLeavesTheBytes(t *testing.T) {
	t.Parallel()
	rec := captureHello(t, &tls.Config{ServerName: "a.test"})
	br := bufio.NewReaderSize(bytes.NewReader(append(rec, "after"...)), maxPeekBytes)
	if _, err := peekClientHello(br); err != nil {
		t.Fatal(err)
	}
	all, _ := io.ReadAll(br)
	if !bytes.Equal(all, append(rec, "after"...)) {
		t.Error("peeking consumed bytes")
	}
}

// FuzzClientHello: the parser never panics, never reads past its
// buffer, consumes nothing, and any name it returns is a normalized host
// name.
func FuzzClientHello(f *testing.F) {
	// Small seeds: a TLS 1.3 hello with its post-quantum key share is
	// 1.8 KB, which the fuzzer spends its time minimizing.
	tls12 := captureHello(f, &tls.Config{ServerName: "b.test", MaxVersion: tls.VersionTLS12})
	f.Add(tls12)
	f.Add(refragment(tls12, 50))
	f.Add(buildHello([][2][]byte{sniExt("x.test", "y.test")}))
	f.Add(buildHello([][2][]byte{sniExt("x.test"), {{0xfe, 0x0d}, {}}}))
	f.Add([]byte{recordHandshake, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), maxPeekBytes)
		h, err := peekClientHello(br)
		if err == nil {
			if n, ok := hostName(h.sni); !ok || n != h.sni || strings.ContainsAny(h.sni, "\x00 /:") {
				t.Fatalf("server name %q", h.sni)
			}
		}
		if len(data) > 0 {
			if b, err := br.ReadByte(); err != nil || b != data[0] {
				t.Fatal("peeking consumed bytes")
			}
		}
	})
}
