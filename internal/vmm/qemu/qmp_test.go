package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQMP serves one QMP client: greeting, then answers per handler.
func fakeQMP(t *testing.T, handle func(cmd string, args json.RawMessage) (ret any, errClass string)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "q.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		enc := json.NewEncoder(c)
		enc.Encode(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": []string{}}})
		sc := bufio.NewScanner(c)
		negotiated := false
		for sc.Scan() {
			var req struct {
				Execute   string          `json:"execute"`
				ID        string          `json:"id"`
				Arguments json.RawMessage `json:"arguments"`
			}
			if json.Unmarshal(sc.Bytes(), &req) != nil {
				return
			}
			if req.Execute == "qmp_capabilities" {
				negotiated = true
				enc.Encode(map[string]any{"return": map[string]any{}, "id": req.ID})
				continue
			}
			if !negotiated {
				enc.Encode(map[string]any{"error": map[string]any{"class": "CommandNotFound", "desc": "negotiate first"}, "id": req.ID})
				continue
			}
			enc.Encode(map[string]any{"event": "STOP", "data": map[string]any{}})
			ret, class := handle(req.Execute, req.Arguments)
			if class != "" {
				enc.Encode(map[string]any{"error": map[string]any{"class": class, "desc": "failed " + req.Execute}, "id": req.ID})
				continue
			}
			enc.Encode(map[string]any{"return": ret, "id": req.ID})
		}
	}()
	return sock
}

func TestQMP(t *testing.T) {
	t.Parallel()
	sock := fakeQMP(t, func(cmd string, args json.RawMessage) (any, string) {
		switch cmd {
		case "query-status":
			return map[string]any{"running": false, "status": "paused"}, ""
		case "migrate":
			var a struct{ URI string }
			json.Unmarshal(args, &a)
			if !strings.HasPrefix(a.URI, "exec:cat > ") {
				return nil, "GenericError"
			}
			return map[string]any{}, ""
		}
		return nil, "CommandNotFound"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	q, err := DialQMP(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	s, err := q.QueryStatus(ctx)
	if err != nil || s.Status != "paused" || s.Running {
		t.Errorf("query-status = %+v, %v", s, err)
	}
	if err := q.Execute(ctx, "migrate", map[string]any{"uri": "exec:cat > 'x'"}, nil); err != nil {
		t.Errorf("migrate: %v", err)
	}
	err = q.Execute(ctx, "bogus", nil, nil)
	var qe *QMPError
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("bogus = %v, want a CommandNotFound QMPError", err)
	}
	select {
	case ev := <-q.Events():
		if ev.Event != "STOP" {
			t.Errorf("event = %+v", ev)
		}
	case <-ctx.Done():
		t.Error("no event delivered")
	}
	q.Close()
	<-q.Done()
	if err := q.Execute(ctx, "query-status", nil, nil); err == nil {
		t.Error("execute after close: want an error")
	}
}

func TestDialQMPNoGreeting(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "q.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("not json\n"))
			time.Sleep(time.Second)
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := DialQMP(ctx, sock); err == nil {
		t.Error("want an error without a greeting")
	}
}

func TestDialUnixLongPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := mkdirAll(dir); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	if len(sock) < 108 {
		t.Fatalf("path %d bytes: not long enough for the test", len(sock))
	}
	d, err := os.OpenFile(dir, os.O_RDONLY|0x200000, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ln, err := net.Listen("unix", fmt.Sprintf("/proc/self/fd/%d/s.sock", d.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := dialUnix(context.Background(), sock)
	if err != nil {
		t.Fatalf("dial %d-byte path: %v", len(sock), err)
	}
	defer c.Close()
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || string(b) != "hi" {
		t.Errorf("read %q, %v", b, err)
	}
}
