package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"
)

func parseString(s string) (*reqHead, error) {
	raw, err := readHead(bufio.NewReader(strings.NewReader(s)))
	if err != nil {
		return nil, err
	}
	return parseRequestHead(raw)
}

func TestParseRequestHead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, head string
		err        error
		host       string
		length     int64
		chunked    bool
	}{
		{"GET", "GET /a?b HTTP/1.1\r\nHost: a.test\r\nAccept: */*\r\n\r\n", nil, "a.test", -1, false},
		{"blank lines first", "\r\n\r\nGET / HTTP/1.1\r\nHost: a.test\r\n\r\n", nil, "a.test", -1, false},
		{"POST with a length", "POST / HTTP/1.1\r\nhost:a.test \r\nContent-Length: 12\r\n\r\n", nil, "a.test", 12, false},
		{"chunked", "POST / HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: Chunked\r\n\r\n", nil, "a.test", -1, true},
		{"HTTP/1.0 without Host", "GET / HTTP/1.0\r\n\r\n", nil, "", -1, false},
		{"HTTP/1.1 without Host", "GET / HTTP/1.1\r\n\r\n", errBadRequest, "", 0, false},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", errBadRequest, "", 0, false},
		{"two lengths", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n", errBadRequest, "", 0, false},
		{"a length list", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1, 1\r\n\r\n", errBadRequest, "", 0, false},
		{"a signed length", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +1\r\n\r\n", errBadRequest, "", 0, false},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", errBadRequest, "", 0, false},
		{"gzip, chunked", "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", errBadRequest, "", 0, false},
		{"chunked over HTTP/1.0", "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", errBadRequest, "", 0, false},
		{"space before the colon", "GET / HTTP/1.1\r\nHost : a.test\r\n\r\n", errBadRequest, "", 0, false},
		{"folded header", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\r\n b\r\n\r\n", errBadRequest, "", 0, false},
		{"bare LF", "GET / HTTP/1.1\nHost: a.test\n\n", errBadRequest, "", 0, false},
		{"bare CR in a value", "GET / HTTP/1.1\r\nHost: a.test\rX: y\r\n\r\n", errBadRequest, "", 0, false},
		{"NUL in a value", "GET / HTTP/1.1\r\nHost: a.test\r\nX: a\x00b\r\n\r\n", errBadRequest, "", 0, false},
		{"two spaces", "GET  / HTTP/1.1\r\nHost: a\r\n\r\n", errBadRequest, "", 0, false},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", errBadRequest, "", 0, false},
		{"HTTP/0.9", "GET /\r\n\r\n", errBadRequest, "", 0, false},
		{"too many blank lines", strings.Repeat("\r\n", 5) + "GET / HTTP/1.1\r\nHost: a\r\n\r\n", errBadRequest, "", 0, false},
		{"over 64 KiB", "GET / HTTP/1.1\r\nHost: a\r\nX: " + strings.Repeat("a", 64<<10) + "\r\n\r\n", errHeadTooLarge, "", 0, false},
		{"ends early", "GET / HTTP/1.1\r\nHost: a\r\n", io.ErrUnexpectedEOF, "", 0, false},
		{"nothing", "", io.EOF, "", 0, false},
	} {
		rh, err := parseString(tc.head)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && (rh.host != tc.host || rh.contentLength != tc.length || rh.chunked != tc.chunked) {
			t.Errorf("%s: host %q length %d chunked %v", tc.name, rh.host, rh.contentLength, rh.chunked)
		}
	}
}

func TestRequestTarget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line string
		form targetForm
		dest string
		path string
		bad  bool
	}{
		{"GET /x HTTP/1.1", originForm, ":0", "/x", false},
		{"OPTIONS * HTTP/1.1", originForm, ":0", "*", false},
		{"GET * HTTP/1.1", 0, "", "", true},
		{"GET http://A.test/x?y HTTP/1.1", absoluteForm, "a.test:80", "/x?y", false},
		{"GET HTTP://a.test HTTP/1.1", absoluteForm, "a.test:80", "/", false},
		{"GET http://a.test?q HTTP/1.1", absoluteForm, "a.test:80", "/?q", false},
		{"GET http://a.test:8080/ HTTP/1.1", absoluteForm, "a.test:8080", "/", false},
		{"GET http://[2001:db8::1]:81/ HTTP/1.1", absoluteForm, "[2001:db8::1]:81", "/", false},
		{"GET http://u:p@a.test/ HTTP/1.1", 0, "", "", true},
		{"GET http://a.test:0/ HTTP/1.1", 0, "", "", true},
		{"GET http://a.test:99999/ HTTP/1.1", 0, "", "", true},
		{"GET https://a.test/ HTTP/1.1", 0, "", "", true},
		{"GET a.test/ HTTP/1.1", 0, "", "", true},
		{"CONNECT a.test:443 HTTP/1.1", authorityForm, "a.test:443", "", false},
		{"CONNECT 10.0.0.5:22 HTTP/1.1", authorityForm, "10.0.0.5:22", "", false},
		{"CONNECT a.test HTTP/1.1", 0, "", "", true},
		{"CONNECT a_b.test:443 HTTP/1.1", authorityForm, "a_b.test:443", "", false},
		{"CONNECT a..test:443 HTTP/1.1", 0, "", "", true},
		{"CONNECT [fe80::1%eth0]:443 HTTP/1.1", 0, "", "", true},
		{"CONNECT ::1:443 HTTP/1.1", 0, "", "", true},
	} {
		rh, err := parseString(tc.line + "\r\nHost: h\r\n\r\n")
		if err != nil {
			t.Fatalf("%s: %v", tc.line, err)
		}
		form, dest, path, err := rh.requestTarget()
		if tc.bad {
			if err == nil {
				t.Errorf("%s: accepted as %v %s", tc.line, form, dest)
			}
			continue
		}
		if err != nil || form != tc.form || dest.String() != tc.dest || path != tc.path {
			t.Errorf("%s: %v %s %q %v; want %v %s %q", tc.line, form, dest, path, err, tc.form, tc.dest, tc.path)
		}
	}
}

func TestCopyChunked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		ok         bool
	}{
		{"plain", "3\r\nabc\r\n0\r\n\r\n", true},
		{"extensions and trailers", "A;x=\"y\"\r\n0123456789\r\n0\r\nT: v\r\n\r\n", true},
		{"no CRLF after data", "3\r\nabcX\r\n0\r\n\r\n", false},
		{"bare LF", "3\nabc\n0\n\n", false},
		{"space before ;", "3 ;x\r\nabc\r\n0\r\n\r\n", false},
		{"16 hex digits", "0000000000000003\r\nabc\r\n0\r\n\r\n", false},
		{"negative", "-3\r\nabc\r\n0\r\n\r\n", false},
		{"bad trailer", "0\r\nT : v\r\n\r\n", false},
		{"ends early", "3\r\nab", false},
	} {
		var out bytes.Buffer
		err := copyChunked(&out, bufio.NewReader(strings.NewReader(tc.body+"NEXT")))
		if (err == nil) != tc.ok || (tc.ok && out.String() != tc.body) {
			t.Errorf("%s: %v, forwarded %q", tc.name, err, out.String())
		}
	}
}

func TestParseAuthority(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
	}{
		{"A.Test", "a.test:80"}, {"a.test.", "a.test:80"}, {"a.test:8080", "a.test:8080"},
		{"1.2.3.4", "1.2.3.4:80"}, {"[::1]:81", "[::1]:81"}, {"[::ffff:10.0.0.5]", "[::ffff:10.0.0.5]:80"},
		{"a.test:", ""}, {"a.test:x", ""}, {"a test", ""}, {"", ""}, {"[::1", ""}, {"[1.2.3.4]", ""},
		{"a.test:443:1", ""}, {strings.Repeat("a", 64) + ".test", ""}, {"-a.test", "-a.test:80"},
	} {
		hp, ok := parseAuthority(tc.in, 80, false)
		got := ""
		if ok {
			got = hp.String()
		}
		if got != tc.want {
			t.Errorf("parseAuthority(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRequestHead: the head reader and parser never panic and stay in
// their bounds, and a head they accept is read the same way by
// net/http: the same method, Host and body framing.
func FuzzRequestHead(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
		"POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 3\r\n\r\nabc",
		"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n",
		"PUT / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"\r\nGET / HTTP/1.0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, err := readHead(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		if len(raw) > maxHeadBytes {
			t.Fatalf("head of %d bytes", len(raw))
		}
		rh, err := parseRequestHead(raw)
		if err != nil {
			return
		}
		form, dest, _, err := rh.requestTarget()
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http refuses more (Host syntax, URL parsing): the proxy refuses those hosts later
		}
		chunked := len(req.TransferEncoding) > 0
		if req.Method != rh.method || chunked != rh.chunked || (!chunked && req.ContentLength != max(rh.contentLength, 0)) {
			t.Fatalf("net/http reads %s length %d chunked %v; the proxy %s length %d chunked %v",
				req.Method, req.ContentLength, chunked, rh.method, rh.contentLength, rh.chunked)
		}
		switch form {
		case originForm:
			if req.Host != rh.host {
				t.Fatalf("net/http reads Host %q, the proxy %q", req.Host, rh.host)
			}
		case absoluteForm:
			if hp, ok := parseAuthority(req.Host, 80, false); !ok || hp != dest {
				t.Fatalf("net/http reads the URL's host %q, the proxy %s", req.Host, dest)
			}
		}
	})
}

// FuzzChunkedBody: what copyChunked forwards as a complete body,
// net/http's chunked reader decodes without error.
func FuzzChunkedBody(f *testing.F) {
	f.Add([]byte("3\r\nabc\r\n0\r\n\r\n"))
	f.Add([]byte("1;a=b\r\nx\r\n0\r\nT: v\r\n\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		if err := copyChunked(&out, bufio.NewReader(bytes.NewReader(data))); err != nil {
			return
		}
		if !bytes.HasPrefix(data, out.Bytes()) {
			t.Fatal("forwarded bytes that were not sent")
		}
		// httputil's reader stops at the last chunk; the trailers follow.
		if _, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(out.Bytes()))); err != nil {
			t.Fatalf("net/http refuses a chunked body the proxy forwarded: %v (%q)", err, out.Bytes())
		}
	})
}
