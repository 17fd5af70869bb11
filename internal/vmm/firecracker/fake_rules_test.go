package firecracker

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFakeEnforcesAPI checks the contract test's oracle: the fake refuses
// requests the published API refuses, and the client surfaces its
// fault_message as an *APIError.
func TestFakeEnforcesAPI(t *testing.T) {
	t.Parallel()
	type call struct {
		method, path string
		body         any
	}
	boot := []call{
		{"PUT", "/boot-source", BootSource{KernelImagePath: "vmlinux"}},
		{"PUT", "/vsock", Vsock{GuestCID: 3, UDSPath: fileVsock}},
		{"PUT", "/actions", Action{ActionType: "InstanceStart"}},
	}
	tests := []struct {
		name  string
		setup []call
		last  call
		want  string
	}{
		{"unknown field", nil, call{"PUT", "/machine-config", map[string]any{"vcpu_count": 1, "mem_size_mib": 128, "bogus": 1}}, `unknown field "bogus"`},
		{"missing required", nil, call{"PUT", "/machine-config", map[string]any{"vcpu_count": 1}}, `missing required field "mem_size_mib"`},
		{"vcpu range", nil, call{"PUT", "/machine-config", MachineConfig{VCPUCount: 33, MemSizeMiB: 128}}, "outside [1, 32]"},
		{"guest cid minimum", nil, call{"PUT", "/vsock", Vsock{GuestCID: 2, UDSPath: "v"}}, "outside [3,"},
		{"bad enum", boot, call{"PATCH", "/vm", VMState{State: "Stopped"}}, `"Stopped" not in`},
		{"drive id mismatch", nil, call{"PUT", "/drives/a", Drive{DriveID: "b", PathOnHost: "vmlinux"}}, "differs from the path id"},
		{"missing file", nil, call{"PUT", "/drives/a", Drive{DriveID: "a", PathOnHost: "nope"}}, "path_on_host"},
		{"pre-boot after start", boot, call{"PUT", "/drives/a", Drive{DriveID: "a", PathOnHost: "vmlinux"}}, "pre-boot only"},
		{"start without boot source", nil, call{"PUT", "/actions", Action{ActionType: "InstanceStart"}}, "needs a boot source"},
		{"pause before start", nil, call{"PATCH", "/vm", VMState{State: "Paused"}}, "post-boot only"},
		{"snapshot while running", boot, call{"PUT", "/snapshot/create", SnapshotCreate{SnapshotPath: "s", MemFilePath: "m"}}, "must be Paused"},
		{"load after config", []call{{"PUT", "/machine-config", MachineConfig{VCPUCount: 1, MemSizeMiB: 128}}},
			call{"PUT", "/snapshot/load", SnapshotLoad{SnapshotPath: "vmlinux", MemBackend: MemBackend{"File", "vmlinux"}}}, "only on a fresh process"},
		{"load with two memory sources", nil, call{"PUT", "/snapshot/load", map[string]any{
			"snapshot_path": "vmlinux", "mem_file_path": "vmlinux", "mem_backend": map[string]any{"backend_type": "File", "backend_path": "vmlinux"}}}, "exactly one of"},
		{"load memory backend enum", nil, call{"PUT", "/snapshot/load", SnapshotLoad{SnapshotPath: "vmlinux", MemBackend: MemBackend{"Anon", "x"}}}, `"Anon" not in`},
		{"logger twice", []call{{"PUT", "/logger", Logger{LogPath: "vmlinux"}}}, call{"PUT", "/logger", Logger{LogPath: "vmlinux"}}, "already initialized"},
		{"not an operation", nil, call{"PUT", "/balloons", map[string]any{}}, "not an operation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, fc := serveFake(t)
			defer fc.stop()
			ctx := context.Background()
			for _, s := range tt.setup {
				if err := c.do(ctx, s.method, s.path, s.body, nil); err != nil {
					t.Fatalf("setup %s %s: %v", s.method, s.path, err)
				}
			}
			err := c.do(ctx, tt.last.method, tt.last.path, tt.last.body, nil)
			ae, ok := errorsAsAPI(err)
			if !ok || ae.Status != http.StatusBadRequest || !strings.Contains(ae.FaultMessage, tt.want) {
				t.Errorf("err = %v, want an APIError containing %q", err, tt.want)
			}
		})
	}
}

func serveFake(t *testing.T) (*apiClient, *fakeFC) {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "vmlinux"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc := newFakeFC(dir, false)
	sock := filepath.Join(dir, fileAPI)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: fc}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	c := newAPIClient(sock)
	t.Cleanup(c.close)
	return c, fc
}
