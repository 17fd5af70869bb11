package firecracker

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseAPIError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body string
		status     int
		want       string
	}{
		{"fault message", `{"fault_message":"The requested operation is not supported after starting the microVM."}`, 400, "The requested operation is not supported after starting the microVM."},
		{"not json", "boom\n", 500, "boom"},
		{"json without fault", `{"other":1}`, 400, `{"other":1}`},
		{"empty", "", 404, "Not Found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := parseAPIError("PUT", "/vm", tt.status, []byte(tt.body))
			if e.FaultMessage != tt.want || e.Status != tt.status {
				t.Errorf("got %+v, want message %q", e, tt.want)
			}
			wrapped := error(e)
			if got, ok := errorsAsAPI(wrapped); !ok || got != e || !strings.Contains(e.Error(), "PUT /vm") {
				t.Errorf("Error() = %q", e.Error())
			}
		})
	}
}

func TestVsockHandshake(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		answer  func(c net.Conn) // runs after "CONNECT 52\n" was read
		wantErr error            // nil: success
		errText string
	}{
		{"ok", func(c net.Conn) { _, _ = c.Write([]byte("OK 1073741824\nguest-bytes")) }, nil, ""},
		{"refused", func(c net.Conn) { c.Close() }, ErrVsockRefused, ""},
		{"garbage", func(c net.Conn) { _, _ = c.Write([]byte("NO\n")) }, nil, "unexpected vsock answer"},
		{"silent", func(c net.Conn) {}, context.DeadlineExceeded, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host, guest := net.Pipe()
			defer host.Close()
			defer guest.Close()
			got := make(chan string, 1)
			go func() {
				line, _ := readLine(guest, 64)
				got <- line
				tt.answer(guest)
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			err := vsockHandshake(ctx, host, 52)
			if line := <-got; line != "CONNECT 52" {
				t.Errorf("sent %q", line)
			}
			switch {
			case tt.wantErr == nil && tt.errText == "":
				if err != nil {
					t.Fatalf("handshake: %v", err)
				}
				rest, _ := io.ReadAll(io.LimitReader(host, int64(len("guest-bytes"))))
				if string(rest) != "guest-bytes" {
					t.Errorf("stream after handshake = %q", rest)
				}
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			case tt.errText != "" && (err == nil || !strings.Contains(err.Error(), tt.errText)):
				t.Errorf("err = %v, want %q", err, tt.errText)
			}
		})
	}
}

func TestDialVsockNoSocket(t *testing.T) {
	t.Parallel()
	_, err := dialVsock(context.Background(), filepath.Join(t.TempDir(), "none.sock"), 1)
	if err == nil || !strings.Contains(err.Error(), "dial vsock port 1") {
		t.Errorf("err = %v", err)
	}
}

func TestJailerArgs(t *testing.T) {
	t.Parallel()
	base := Config{FirecrackerBinary: "/usr/bin/firecracker", UID: 123, GID: 456, ChrootBase: "/srv/jailer", CgroupVersion: 2}
	withNS := base
	withNS.NetNS = "/var/run/netns/vm1"
	fc := []string{"--api-sock", "api.sock"}
	common := []string{"--id", "vm-1", "--exec-file", "/usr/bin/firecracker", "--uid", "123", "--gid", "456",
		"--chroot-base-dir", "/srv/jailer", "--cgroup-version", "2"}
	tests := []struct {
		name  string
		cfg   Config
		extra []string
		want  []string
	}{
		{"plain", base, nil, slices.Concat(common, []string{"--daemonize", "--", "--api-sock", "api.sock"})},
		{"netns", withNS, nil, slices.Concat(common, []string{"--netns", "/var/run/netns/vm1", "--daemonize", "--", "--api-sock", "api.sock"})},
		{"cgroup", base, []string{"--cgroup", "memory.max=1"}, slices.Concat(common, []string{"--cgroup", "memory.max=1", "--daemonize", "--", "--api-sock", "api.sock"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := jailerArgs(tt.cfg, "vm-1", tt.extra, fc); !slices.Equal(got, tt.want) {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
	if d := chrootDir(base, "vm-1"); d != "/srv/jailer/firecracker/vm-1" {
		t.Errorf("chroot dir = %s", d)
	}
}

func TestJailID(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"sess_1/ä", strings.Repeat("x", 100), "", "ok-id"} {
		id := jailID(in)
		if len(id) > 64 || id == "" || strings.Trim(id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			t.Errorf("jailID(%q) = %q", in, id)
		}
	}
}

func TestProbe(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	kvm, pvm, bin := filepath.Join(dir, "kvm"), filepath.Join(dir, "kvm_pvm"), filepath.Join(dir, "firecracker")
	for _, f := range []string{kvm, bin} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(pvm, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		cfg         Config
		kvm, pvm    string
		ok          bool
		reasonMatch string
	}{
		{"no binary", Config{FirecrackerBinary: filepath.Join(dir, "missing")}, kvm, pvm + "x", false, "no firecracker binary"},
		{"no jailer", Config{FirecrackerBinary: bin, UseJailer: true, JailerBinary: filepath.Join(dir, "nj")}, kvm, pvm + "x", false, "no jailer"},
		{"no kvm", Config{FirecrackerBinary: bin}, kvm + "x", pvm + "x", false, "not usable"},
		{"kvm_pvm", Config{FirecrackerBinary: bin}, kvm, pvm, false, "kvm_pvm"},
		{"usable", Config{FirecrackerBinary: bin}, kvm, pvm + "x", true, "available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ok, reason := probe(tt.cfg, tt.kvm, tt.pvm)
			if ok != tt.ok || !strings.Contains(reason, tt.reasonMatch) {
				t.Errorf("probe = %v %q, want %v %q", ok, reason, tt.ok, tt.reasonMatch)
			}
		})
	}
}

func TestMergeLayer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base, layer := filepath.Join(dir, "base"), filepath.Join(dir, "layer")
	if err := os.WriteFile(base, bytes.Repeat([]byte{'b'}, 3*4096), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(layer)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteAt(bytes.Repeat([]byte{'d'}, 4096), 4096)
	_ = f.Truncate(3 * 4096)
	f.Close()
	if err := mergeLayer(layer, base); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(base)
	want := slices.Concat(bytes.Repeat([]byte{'b'}, 4096), bytes.Repeat([]byte{'d'}, 4096), bytes.Repeat([]byte{'b'}, 4096))
	if !bytes.Equal(got, want) {
		t.Error("merged memory differs: the layer's holes must keep the base's pages")
	}
}

func TestDrainKeepsTail(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "log")
	if err := makeFIFO(p, -1, -1); err != nil {
		t.Fatal(err)
	}
	d, err := startDrain(p, 10)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.WriteString("0123456789abcdefEND")
	w.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(d.tail(), "END") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	d.stop()
	if got := d.tail(); got != "9abcdefEND" {
		t.Errorf("tail = %q, want the last 10 bytes", got)
	}
}

func TestKernelCmdline(t *testing.T) {
	t.Parallel()
	b := &Backend{cfg: Config{GuestPort: 1024, CtlPort: 1025, KernelArgs: "extra=1"}}
	got := b.kernelCmdline("My_Host")
	for _, w := range []string{"console=ttyS0", "engrams.root=/dev/vda", "engrams.bundle=/dev/vdb", "engrams.port=vsock:1024",
		"engrams.ctl=vsock:1025", "engrams.hostname=myhost", "extra=1"} {
		if !slices.Contains(strings.Fields(got), w) {
			t.Errorf("cmdline %q lacks %q", got, w)
		}
	}
	if strings.Contains(got, "engrams.ip=") {
		t.Errorf("cmdline %q configures a network without a tap", got)
	}
}
