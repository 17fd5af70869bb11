package s3_test

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/blobtest"
)

// versitygwBinary finds the versitygw gateway: $ENGRAMS_VERSITYGW, else
// PATH. scripts/install-versitygw.sh builds it.
func versitygwBinary() (string, string) {
	if p := os.Getenv("ENGRAMS_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", "ENGRAMS_VERSITYGW=" + p + ": " + err.Error()
		}
		return p, ""
	}
	p, err := exec.LookPath("versitygw")
	if err != nil {
		return "", "versitygw not on PATH and ENGRAMS_VERSITYGW unset " +
			"(run scripts/install-versitygw.sh)"
	}
	return p, ""
}

// startVersitygw runs a versitygw posix gateway on 127.0.0.1 over a fresh
// temp directory for the rest of the test.
func startVersitygw(t testing.TB) *server {
	t.Helper()
	bin, reason := versitygwBinary()
	if bin == "" {
		t.Skip(reason)
	}
	// Metadata (ETags) in a sidecar directory, so the gateway works on
	// filesystems without user xattrs (tmpfs on older kernels).
	root, side := t.TempDir(), t.TempDir()
	var out syncBuffer
	var addr string
	for attempt := 0; ; attempt++ {
		addr = freeAddr(t)
		cmd := exec.Command(bin, "--access", testAccessKey, "--secret", testSecretKey,
			"--port", addr, "--quiet", "posix", "--sidecar", side, root)
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatalf("start versitygw: %v", err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-exited
		})
		if err := waitListening(addr, exited); err == nil {
			break
		} else if attempt == 2 {
			t.Fatalf("versitygw on %s: %v\n%s", addr, err, out.String())
		}
	}
	return &server{endpoint: addr}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// waitListening polls addr until it accepts, the process exits, or 20 s
// pass.
func waitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case werr := <-exited:
			return &exitError{werr}
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return err
		}
	}
}

type exitError struct{ err error }

func (e *exitError) Error() string { return "exited early: " + e.errString() }

func (e *exitError) errString() string {
	if e.err == nil {
		return "status 0"
	}
	return e.err.Error()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestConformanceVersitygw(t *testing.T) {
	srv := startVersitygw(t)
	blobtest.Run(t, func(t *testing.T) blob.Store {
		return srv.open(t, srv.newBucket(t), "")
	})
}

func BenchmarkVersitygw(b *testing.B) {
	srv := startVersitygw(b)
	blobtest.Bench(b, srv.open(b, srv.newBucket(b), ""))
}
