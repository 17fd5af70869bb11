package relay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/engrams/engrams/internal/guestapi"
)

// Harness event stream bounds. The guest is hostile: whatever it streams,
// one machine's relay holds at most one line and one batch.
const (
	// maxEventLine bounds one NDJSON event line (1 MiB). The coordinator
	// keeps at most 64 KiB of an event's data (a larger one becomes a note
	// of its size) and the adapter cuts tool output at 16 KiB, so an honest
	// line is far shorter; a longer one ends the stream after maxEventLine+1
	// bytes and the relay skips that event.
	maxEventLine = 1 << 20
	// eventReadBuffer is the stream's read buffer (64 KiB); a line is read
	// through it in pieces.
	eventReadBuffer = 64 << 10
)

// errSkip: the line read is no event to relay (blank, or one the
// coordinator already has); read on.
var errSkip = errors.New("no event to relay")

// boundError ends an event stream at a bound; seq is the event it cut
// (the one after the last taken), which the relay skips.
type boundError struct {
	Exceeded
	seq int64
}

func (e *boundError) Error() string { return e.Message }

// eventReader reads a guest's harness event stream line by line, each
// line at most maxEventLine bytes, and decodes each into an event past
// the last one taken.
type eventReader struct {
	br   *bufio.Reader
	line []byte // reused between lines
	last int64  // the seq of the last event taken (the cursor at first)
}

func newEventReader(br *bufio.Reader, after int64) *eventReader {
	return &eventReader{br: br, last: after}
}

// next reads one line and returns its event and size. A blank line or an
// event at or below the last one is errSkip; a line over maxEventLine, or
// one that is no event, is a *boundError; a read failure (the stream
// ended, mid-line or not) is returned as is.
func (r *eventReader) next() (guestapi.HarnessEvent, int, error) {
	line, err := readLine(r.br, r.line[:0], maxEventLine)
	r.line = line[:0]
	if cap(r.line) > eventReadBuffer { // a long line's buffer is not kept
		r.line = nil
	}
	n := len(line)
	if errors.Is(err, errLineTooLong) {
		return guestapi.HarnessEvent{}, n, &boundError{seq: r.last + 1, Exceeded: Exceeded{Bound: BoundEventLine, Limit: maxEventLine, Got: int64(n),
			Message: fmt.Sprintf("the harness event after seq %d is longer than %d bytes (read %d without a newline): the host ended the stream and skips that event", r.last, maxEventLine, n)}}
	}
	if err != nil {
		return guestapi.HarnessEvent{}, n, err
	}
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return guestapi.HarnessEvent{}, n, errSkip
	}
	e, err := decodeEvent(line)
	if err != nil {
		return guestapi.HarnessEvent{}, n, &boundError{seq: r.last + 1, Exceeded: Exceeded{Bound: BoundEventInvalid, Limit: maxEventLine, Got: int64(n),
			Message: fmt.Sprintf("the harness event after seq %d is not a valid event (%v): the host ended the stream and skips that event", r.last, err)}}
	}
	if e.Seq <= r.last {
		return guestapi.HarnessEvent{}, n, errSkip
	}
	r.last = e.Seq
	return e, n, nil
}

// errLineTooLong: a line ran past its bound.
var errLineTooLong = errors.New("line too long")

// readLine appends the next line of br (without its newline) to buf. A
// line longer than limit stops after limit+1 bytes with errLineTooLong;
// a stream ending mid-line returns the part read with the read error.
func readLine(br *bufio.Reader, buf []byte, limit int) ([]byte, error) {
	for {
		frag, err := br.ReadSlice('\n')
		n := len(frag)
		if err == nil {
			n-- // the newline
		}
		if len(buf)+n > limit {
			return append(buf, frag[:limit+1-len(buf)]...), errLineTooLong
		}
		buf = append(buf, frag[:n]...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return buf, err
		}
	}
}

// decodeEvent decodes one line into an event with a seq and a type.
func decodeEvent(line []byte) (guestapi.HarnessEvent, error) {
	var e guestapi.HarnessEvent
	if err := json.Unmarshal(line, &e); err != nil {
		return e, fmt.Errorf("decode: %w", err)
	}
	if e.Seq <= 0 || e.Type == "" {
		return e, fmt.Errorf("event with seq %d and type %.64q: want a seq above 0 and a type", e.Seq, e.Type)
	}
	return e, nil
}
