package initproto_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

func replyLine(r initproto.Reply) string {
	b, _ := json.Marshal(r)
	return string(b) + "\n"
}

func TestReadReply(t *testing.T) {
	t.Parallel()
	hello := replyLine(initproto.Reply{Hello: true, OK: true})
	answer := replyLine(initproto.Reply{ID: 7, OK: true, GuestPID: 42})
	tests := []struct {
		name    string
		in      string
		wantPID int
		wantErr error
	}{
		{name: "the answer", in: answer, wantPID: 42},
		{name: "after the hello, noise and another id", in: hello + "garbage\n" + replyLine(initproto.Reply{ID: 6}) + answer, wantPID: 42},
		{name: "a long error within the line bound", in: replyLine(initproto.Reply{ID: 7, OK: true, GuestPID: 42, Error: strings.Repeat("e", initproto.MaxReplyLine-100)}), wantPID: 42},
		{name: "a line over the bound", in: replyLine(initproto.Reply{ID: 7, Error: strings.Repeat("e", initproto.MaxReplyLine)}), wantErr: initproto.ErrReplyBound},
		{name: "an endless line", in: strings.Repeat("x", 10*initproto.MaxReplyLine), wantErr: initproto.ErrReplyBound},
		{name: "too many other lines", in: strings.Repeat(hello, initproto.MaxReplyLines) + answer, wantErr: initproto.ErrReplyBound},
		{name: "the port closes", in: hello, wantErr: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rep, err := initproto.ReadReply(bufio.NewReader(strings.NewReader(tt.in)), 7)
			if !errors.Is(err, tt.wantErr) || rep.GuestPID != tt.wantPID {
				t.Fatalf("ReadReply: %+v, %v; want pid %d, %v", rep, err, tt.wantPID, tt.wantErr)
			}
		})
	}
}

// FuzzReadReply feeds the host's reader of init's control replies what a
// hostile guest may send: it never panics, reads at most a line's and a
// count's worth, and returns only the answer to its own message.
func FuzzReadReply(f *testing.F) {
	f.Add([]byte(replyLine(initproto.Reply{Hello: true, OK: true})+replyLine(initproto.Reply{ID: 7, OK: true})), uint64(7))
	f.Add([]byte("{\"id\":7,\"ok\":tru\n{\"id\":7}\n"), uint64(7))
	f.Add(bytes.Repeat([]byte("{}\n"), 20), uint64(0))
	f.Add(bytes.Repeat([]byte("y"), 5000), uint64(1))
	f.Fuzz(func(t *testing.T, in []byte, id uint64) {
		src := &countingReader{r: bytes.NewReader(in)}
		rep, err := initproto.ReadReply(bufio.NewReaderSize(src, 4096), id)
		if max := initproto.MaxReplyLines*(initproto.MaxReplyLine+1) + 4096; src.n > max {
			t.Fatalf("read %d bytes, over %d", src.n, max)
		}
		if err == nil && rep.ID != id {
			t.Fatalf("returned the reply to %d for message %d", rep.ID, id)
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
