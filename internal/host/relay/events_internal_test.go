package relay

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// readAll reads events until the stream ends or a bound does.
func readAll(r *eventReader) (seqs []int64, bound string, err error) {
	for {
		e, _, err := r.next()
		if errors.Is(err, errSkip) {
			continue
		}
		var be *boundError
		if errors.As(err, &be) {
			return seqs, be.Bound, nil
		}
		if err != nil {
			return seqs, "", err
		}
		seqs = append(seqs, e.Seq)
	}
}

func TestEventReader(t *testing.T) {
	t.Parallel()
	long := func(n int) string {
		return `{"seq":2,"type":"t","data":"` + strings.Repeat("a", n-len(`{"seq":2,"type":"t","data":""}`)) + `"}`
	}
	tests := []struct {
		name      string
		stream    string
		after     int64
		want      []int64
		wantBound string
		wantErr   error
	}{
		{name: "events", stream: "{\"seq\":1,\"type\":\"idle\"}\n{\"seq\":2,\"type\":\"idle\"}\n", want: []int64{1, 2}, wantErr: io.EOF},
		{name: "blank lines and spaces", stream: "\n \r\n {\"seq\":1,\"type\":\"idle\"} \n", want: []int64{1}, wantErr: io.EOF},
		{name: "at or below the cursor", after: 5, stream: "{\"seq\":5,\"type\":\"idle\"}\n{\"seq\":6,\"type\":\"idle\"}\n{\"seq\":6,\"type\":\"idle\"}\n", want: []int64{6}, wantErr: io.EOF},
		{name: "a line of exactly the bound", stream: "{\"seq\":1,\"type\":\"idle\"}\n" + long(maxEventLine) + "\n", want: []int64{1, 2}, wantErr: io.EOF},
		{name: "a line one byte over", stream: "{\"seq\":1,\"type\":\"idle\"}\n" + long(maxEventLine+1) + "\n", want: []int64{1}, wantBound: BoundEventLine},
		{name: "not JSON", stream: "{\"seq\":1,\"type\":\"idle\"}\nnope\n", want: []int64{1}, wantBound: BoundEventInvalid},
		{name: "no seq", stream: "{\"type\":\"idle\"}\n", wantBound: BoundEventInvalid},
		{name: "no type", stream: "{\"seq\":3}\n", wantBound: BoundEventInvalid},
		{name: "two values on a line", stream: "{\"seq\":1,\"type\":\"idle\"}{\"seq\":2,\"type\":\"idle\"}\n", wantBound: BoundEventInvalid},
		{name: "the stream ends mid-line", stream: "{\"seq\":1,\"type\":\"idle\"}\n{\"seq\":2,", want: []int64{1}, wantErr: io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newEventReader(bufio.NewReaderSize(strings.NewReader(tt.stream), eventReadBuffer), tt.after)
			got, bound, err := readAll(r)
			if !errors.Is(err, tt.wantErr) || bound != tt.wantBound {
				t.Fatalf("ended with bound %q, err %v; want %q, %v", bound, err, tt.wantBound, tt.wantErr)
			}
			if len(got) != len(tt.want) || (len(got) > 0 && got[len(got)-1] != tt.want[len(tt.want)-1]) {
				t.Fatalf("events %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzEventStream feeds the relay's event reader what a hostile guest may
// stream: it never panics, takes only events with rising seqs above the
// cursor and a type, and never holds a line over the bound.
func FuzzEventStream(f *testing.F) {
	f.Add([]byte("{\"seq\":1,\"type\":\"idle\"}\n{\"seq\":2,\"type\":\"run_started\",\"data\":{\"harness\":\"shell\"}}\n"), int64(0))
	f.Add([]byte("\n\n{\"seq\":9,\"type\":\"x\",\"turn\":\"t1\",\"at\":\"2026-01-01T00:00:00Z\"}\n{\"seq\":3,\"type\":\"x\"}\n"), int64(2))
	f.Add([]byte("{\"seq\":1,\"type\":\n"), int64(0))
	f.Add(bytes.Repeat([]byte("a"), 3*eventReadBuffer), int64(0))
	f.Add([]byte("{\"seq\":-1,\"type\":\"idle\"}\n{\"seq\":1e30,\"type\":\"idle\"}\n"), int64(0))
	f.Fuzz(func(t *testing.T, stream []byte, after int64) {
		r := newEventReader(bufio.NewReaderSize(bytes.NewReader(stream), eventReadBuffer), after)
		last := after
		for {
			e, n, err := r.next()
			if n > maxEventLine+1 || cap(r.line) > maxEventLine+eventReadBuffer {
				t.Fatalf("read a line of %d bytes (buffer %d), over the bound", n, cap(r.line))
			}
			if errors.Is(err, errSkip) {
				continue
			}
			if err != nil {
				return
			}
			if e.Seq <= last || e.Type == "" {
				t.Fatalf("took event seq %d type %q after %d", e.Seq, e.Type, last)
			}
			last = e.Seq
		}
	})
}
