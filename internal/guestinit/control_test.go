package guestinit

import (
	"bufio"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
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

func TestWriteResolvConf(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, before, nameserver string
		symlink, ok              bool
	}{
		{"new file", "", "10.0.2.2", false, true},
		{"replaces a file", "nameserver 8.8.8.8\n", "10.0.2.2", false, true},
		{"replaces a symlink to a stub", "", "10.0.2.2", true, true},
		{"refuses a name", "nameserver 8.8.8.8\n", "dns.example", false, false},
		{"refuses IPv6", "nameserver 8.8.8.8\n", "fe80::1", false, false},
		{"refuses injected lines", "nameserver 8.8.8.8\n", "10.0.2.2\nnameserver 8.8.8.8", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "resolv.conf")
			if tt.symlink {
				if err := os.Symlink(filepath.Join(dir, "missing", "stub-resolv.conf"), path); err != nil {
					t.Fatal(err)
				}
			} else if tt.before != "" {
				os.WriteFile(path, []byte(tt.before), 0o644)
			}
			err := writeResolvConf(path, tt.nameserver)
			b, _ := os.ReadFile(path)
			if !tt.ok {
				if err == nil || string(b) != tt.before {
					t.Errorf("err %v, file %q; want an error and the file unchanged", err, b)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Lstat(path); fi == nil || !fi.Mode().IsRegular() {
				t.Errorf("resolv.conf is not a regular file: %v", fi)
			}
			var ns []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "nameserver") {
					ns = append(ns, l)
				}
			}
			if len(ns) != 1 || ns[0] != "nameserver "+tt.nameserver {
				t.Errorf("nameserver lines %q, want only %q", ns, tt.nameserver)
			}
		})
	}
}
