package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// HTTP head bounds.
const (
	maxHeadBytes   = 64 << 10 // a request line and its headers (or a chunked body's trailers)
	maxHeaderLines = 256
	maxBlankLines  = 4 // empty lines tolerated before a request line
)

var (
	errHeadTooLarge = errors.New("request head over 64 KiB")
	errBadRequest   = errors.New("malformed request")
)

// readHead reads one request head from br: the request line and header
// lines through the empty line, at most maxHeadBytes (blank lines before
// the request line count but are not returned). Every line must end in
// CRLF. io.EOF means the connection ended before a request began.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	total, blanks, lineStart := 0, 0, 0
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		if total > maxHeadBytes {
			return nil, errHeadTooLarge
		}
		head = append(head, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && total == 0 {
				return nil, io.EOF
			}
			if errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line := head[lineStart:]
		if !bytes.HasSuffix(line, []byte("\r\n")) {
			return nil, fmt.Errorf("%w: a line not ended by CRLF", errBadRequest)
		}
		switch {
		case len(line) == 2 && lineStart == 0:
			if blanks++; blanks > maxBlankLines {
				return nil, fmt.Errorf("%w: blank lines before the request line", errBadRequest)
			}
			head = head[:0]
		case len(line) == 2:
			return head, nil
		default:
			lineStart = len(head)
		}
	}
}

// header is one header line, its name as sent.
type header struct{ name, value string }

// reqHead is a parsed request head.
type reqHead struct {
	method, target, version string
	headers                 []header
	host                    string // the Host header; "" when absent
	contentLength           int64  // -1: none
	chunked                 bool
	upgrade                 bool // an Upgrade header (not served over plain HTTP)
}

// parseRequestHead parses a head readHead returned, strictly: one space
// between the request line's parts, HTTP/1.0 or 1.1, header names that
// are tokens with the colon right after, no obsolete line folding, no
// control bytes, at most one Host, Content-Length and Transfer-Encoding
// (only "chunked", never with a Content-Length). What it accepts, every
// HTTP/1.1 server reads the same way.
func parseRequestHead(raw []byte) (*reqHead, error) {
	if !bytes.HasSuffix(raw, []byte("\r\n\r\n")) {
		return nil, fmt.Errorf("%w: unterminated head", errBadRequest)
	}
	lines := strings.Split(string(raw[:len(raw)-4]), "\r\n")
	if len(lines) > maxHeaderLines+1 {
		return nil, fmt.Errorf("%w: over %d header lines", errBadRequest, maxHeaderLines)
	}
	rh := &reqHead{contentLength: -1}
	if err := rh.parseRequestLine(lines[0]); err != nil {
		return nil, err
	}
	var hosts, lengths, encodings int
	for _, line := range lines[1:] {
		h, err := parseHeaderLine(line)
		if err != nil {
			return nil, err
		}
		rh.headers = append(rh.headers, h)
		switch strings.ToLower(h.name) {
		case "host":
			hosts++
			rh.host = h.value
		case "content-length":
			lengths++
			n, ok := parseLength(h.value)
			if !ok {
				return nil, fmt.Errorf("%w: Content-Length %.40q", errBadRequest, h.value)
			}
			rh.contentLength = n
		case "transfer-encoding":
			encodings++
			if !strings.EqualFold(h.value, "chunked") {
				return nil, fmt.Errorf("%w: Transfer-Encoding %.40q (only chunked)", errBadRequest, h.value)
			}
			rh.chunked = true
		case "upgrade":
			rh.upgrade = true
		}
	}
	switch {
	case hosts > 1 || lengths > 1 || encodings > 1:
		return nil, fmt.Errorf("%w: a repeated Host, Content-Length or Transfer-Encoding", errBadRequest)
	case rh.chunked && (lengths > 0 || rh.version == "HTTP/1.0"):
		return nil, fmt.Errorf("%w: Transfer-Encoding with Content-Length or HTTP/1.0", errBadRequest)
	case hosts == 0 && rh.version == "HTTP/1.1":
		return nil, fmt.Errorf("%w: HTTP/1.1 without Host", errBadRequest)
	}
	return rh, nil
}

func (rh *reqHead) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, version, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isToken(method) || target == "" || !visible(target) {
		return fmt.Errorf("%w: request line %.80q", errBadRequest, line)
	}
	if version != "HTTP/1.1" && version != "HTTP/1.0" {
		return fmt.Errorf("%w: version %.20q", errBadRequest, version)
	}
	rh.method, rh.target, rh.version = method, target, version
	return nil
}

// parseHeaderLine parses "name: value" (optional whitespace around the
// value only).
func parseHeaderLine(line string) (header, error) {
	name, value, ok := strings.Cut(line, ":")
	if !ok || !isToken(name) {
		return header{}, fmt.Errorf("%w: header line %.80q", errBadRequest, line)
	}
	value = strings.Trim(value, " \t")
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return header{}, fmt.Errorf("%w: control byte in header %.40q", errBadRequest, name)
		}
	}
	return header{name, value}, nil
}

// parseLength parses a Content-Length: 1 to 18 digits.
func parseLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !tokenByte(c) {
			return false
		}
	}
	return true
}

func tokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// visible reports whether s is printable ASCII without spaces.
func visible(s string) bool {
	for _, c := range []byte(s) {
		if c <= 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// target forms of a request.
type targetForm int

const (
	originForm    targetForm = iota // "/path?query" or "*"
	absoluteForm                    // "http://host[:port]/path" (an explicit proxy request)
	authorityForm                   // "host:port" (CONNECT)
)

// requestTarget classifies rh's target: its form, the destination it
// names (absolute- and authority-form) and the origin-form path an
// absolute-form target is forwarded as.
func (rh *reqHead) requestTarget() (form targetForm, dest hostPort, path string, err error) {
	t := rh.target
	if rh.method == "CONNECT" {
		dest, ok := parseAuthority(t, 0, true)
		if !ok {
			return 0, hostPort{}, "", fmt.Errorf("%w: CONNECT target %.80q (want host:port)", errBadRequest, t)
		}
		return authorityForm, dest, "", nil
	}
	if strings.HasPrefix(t, "/") || (t == "*" && rh.method == "OPTIONS") {
		return originForm, hostPort{}, t, nil
	}
	const scheme = "http://"
	if len(t) < len(scheme) || !strings.EqualFold(t[:len(scheme)], scheme) {
		return 0, hostPort{}, "", fmt.Errorf("%w: target %.80q (an https URL goes through CONNECT)", errBadRequest, t)
	}
	rest := t[len(scheme):]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	auth, path := rest[:end], rest[end:]
	if strings.ContainsAny(auth, "@") || strings.Contains(path, "#") {
		return 0, hostPort{}, "", fmt.Errorf("%w: target %.80q (user info or fragment)", errBadRequest, t)
	}
	dest, ok := parseAuthority(auth, 80, false)
	if !ok {
		return 0, hostPort{}, "", fmt.Errorf("%w: target %.80q", errBadRequest, t)
	}
	switch {
	case path == "":
		path = "/"
	case path[0] == '?':
		path = "/" + path
	}
	return absoluteForm, dest, path, nil
}
