package guestinit

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/engrams/engrams/internal/guestinit/initproto"
)

// TestServeLinesAnswersEachControl drives the control protocol over a
// stream, as the vsock and virtio-serial channels do.
func TestServeLinesAnswersEachControl(t *testing.T) {
	t.Parallel()
	host, guest := net.Pipe()
	sup := NewSupervisor([]string{"/bin/true"}, slog.New(slog.DiscardHandler))
	signaled := 0
	done := make(chan error, 1)
	go func() { done <- serveLines(guest, controller{sup: sup}, func() { signaled++ }) }()
	r := bufio.NewReader(host)
	for i, line := range []string{`{"id":7,"env":{"A":"b"}}`, `not json`} {
		if _, err := io.WriteString(host, line+"\n"); err != nil {
			t.Fatal(err)
		}
		b, err := r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var rep initproto.Reply
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 0:
			if rep.ID != 7 || !rep.OK {
				t.Fatalf("reply %+v, want id 7 ok", rep)
			}
		case 1:
			if rep.OK || rep.Error == "" {
				t.Fatalf("malformed control answered %+v, want an error", rep)
			}
		}
	}
	host.Close()
	if err := <-done; err == nil {
		t.Fatal("serveLines returned nil after the stream closed")
	}
	if signaled != 2 {
		t.Fatalf("signaled %d times, want 2", signaled)
	}
}

// TestRestartBeforeRun checks a restart asked for before the supervisor
// runs (the first control message at boot) is answered at once: the
// daemon's first start sees the new env.
func TestRestartBeforeRun(t *testing.T) {
	t.Parallel()
	sup := NewSupervisor([]string{"/bin/true"}, slog.New(slog.DiscardHandler))
	rep := controller{sup: sup}.handle([]byte(`{"id":3,"restart":true}`))
	if !rep.OK || rep.ID != 3 || rep.GuestPID != 0 {
		t.Fatalf("reply %+v, want id 3 ok without a pid", rep)
	}
}
