package egress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Chunked body bounds.
const maxChunkLine = 4 << 10 // a chunk-size line with its extensions

// copyBody forwards the body rh announces (a Content-Length or chunked;
// none otherwise), exactly its bytes.
func copyBody(dst io.Writer, br *bufio.Reader, rh *reqHead) error {
	switch {
	case rh.chunked:
		return copyChunked(dst, br)
	case rh.contentLength > 0:
		n, err := io.CopyN(dst, br, rh.contentLength)
		if err != nil && n < rh.contentLength && errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// copyChunked forwards a chunked body through its last chunk and
// trailers, checking its framing strictly (hex sizes, CRLF after each
// chunk, trailers as header lines within maxHeadBytes).
func copyChunked(dst io.Writer, br *bufio.Reader) error {
	for {
		line, err := readLine(br, maxChunkLine)
		if err != nil {
			return err
		}
		size, err := parseChunkSize(line)
		if err != nil {
			return err
		}
		if _, err := dst.Write(line); err != nil {
			return err
		}
		if size == 0 {
			return copyTrailers(dst, br)
		}
		if _, err := io.CopyN(dst, br, size); err != nil {
			return err
		}
		crlf, err := readLine(br, 2)
		if err != nil || len(crlf) != 2 {
			return fmt.Errorf("%w: chunk not followed by CRLF", errBadRequest)
		}
		if _, err := dst.Write(crlf); err != nil {
			return err
		}
	}
}

func copyTrailers(dst io.Writer, br *bufio.Reader) error {
	total := 0
	for {
		line, err := readLine(br, maxHeadBytes-total)
		if err != nil {
			return err
		}
		total += len(line)
		if len(line) > 2 {
			if _, err := parseHeaderLine(string(line[:len(line)-2])); err != nil {
				return err
			}
		}
		if _, err := dst.Write(line); err != nil {
			return err
		}
		if len(line) == 2 {
			return nil
		}
	}
}

// readLine reads one CRLF-ended line of at most limit bytes (CRLF
// included); a bare CR or LF in it is refused.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("%w: a body line over %d bytes", errBadRequest, limit)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
		body := line[:len(line)-1]
		if !bytes.HasSuffix(body, []byte("\r")) || bytes.ContainsAny(body[:len(body)-1], "\r\n") {
			return nil, fmt.Errorf("%w: a body line not ended by CRLF", errBadRequest)
		}
		return line, nil
	}
}

// parseChunkSize parses "HEX[;ext]\r\n": 1 to 15 hex digits, extensions
// of visible bytes, spaces and tabs, no whitespace before them.
func parseChunkSize(line []byte) (int64, error) {
	s := line[:len(line)-2]
	var n int64
	i := 0
	for ; i < len(s); i++ {
		v, ok := hexValue(s[i])
		if !ok {
			break
		}
		n = n<<4 | int64(v)
	}
	if i == 0 || i > 15 {
		return 0, fmt.Errorf("%w: chunk size %.20q", errBadRequest, s)
	}
	if rest := s[i:]; len(rest) > 0 {
		if rest[0] != ';' {
			return 0, fmt.Errorf("%w: chunk size %.20q", errBadRequest, s)
		}
		for _, c := range rest {
			if (c < 0x20 && c != '\t') || c == 0x7f {
				return 0, fmt.Errorf("%w: control byte in a chunk extension", errBadRequest)
			}
		}
	}
	return n, nil
}

func hexValue(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
