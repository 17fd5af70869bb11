package guestapi

import (
	"io"
	"net/http"
)

// RelayStream copies a streamed answer (PathExecRun's NDJSON) to w,
// flushing what each read brought so output is seen as it is produced,
// except the read that also ends the stream: that one goes out with the
// end of the response, in the same write. A command that exits at once
// then crosses every hop as one message instead of two.
func RelayStream(w http.ResponseWriter, r io.Reader) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if err == nil {
				_ = rc.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}
