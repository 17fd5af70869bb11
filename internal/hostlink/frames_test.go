package hostlink

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// recordConn records each Write it receives.
type recordConn struct {
	net.Conn
	writes [][]byte
}

func (c *recordConn) Write(p []byte) (int, error) {
	c.writes = append(c.writes, append([]byte(nil), p...))
	return len(p), nil
}

func header(typ byte, length uint32) []byte {
	h := make([]byte, yamuxHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint32(h[4:8], 7)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

func TestFrameConnJoinsDataHeaderWithBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		writes [][]byte
		want   [][]byte
	}{
		{"data frame: one write", [][]byte{header(0, 3), []byte("abc")}, [][]byte{append(header(0, 3), "abc"...)}},
		{"window update passes at once", [][]byte{header(1, 65536)}, [][]byte{header(1, 65536)}},
		{"empty data frame (FIN) passes at once", [][]byte{header(0, 0)}, [][]byte{header(0, 0)}},
		{"ping then data", [][]byte{header(2, 1), header(0, 2), []byte("hi")}, [][]byte{header(2, 1), append(header(0, 2), "hi"...)}},
		{"two data frames", [][]byte{header(0, 1), []byte("a"), header(0, 1), []byte("b")},
			[][]byte{append(header(0, 1), 'a'), append(header(0, 1), 'b')}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := &recordConn{}
			c := newFrameConn(rec)
			for _, w := range tt.writes {
				if n, err := c.Write(w); err != nil || n != len(w) {
					t.Fatalf("Write(%d bytes) = %d, %v", len(w), n, err)
				}
			}
			if len(rec.writes) != len(tt.want) {
				t.Fatalf("got %d writes, want %d", len(rec.writes), len(tt.want))
			}
			for i := range tt.want {
				if !bytes.Equal(rec.writes[i], tt.want[i]) {
					t.Errorf("write %d = %x, want %x", i, rec.writes[i], tt.want[i])
				}
			}
		})
	}
}
