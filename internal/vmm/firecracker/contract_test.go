package firecracker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// Call sequences Firecracker's API description requires of this backend.
var (
	wantBoot     = []string{"PUT /logger", "PUT /metrics", "PUT /machine-config", "PUT /boot-source", "PUT /drives/root", "PUT /drives/bundle", "PUT /vsock", "PUT /actions"}
	wantSnapshot = []string{"PATCH /vm", "PUT /snapshot/create"}
	wantResume   = []string{"PATCH /vm"}
	wantPause    = []string{"PATCH /vm"}
	wantLoad     = []string{"PUT /logger", "PUT /metrics", "PUT /snapshot/load"}
)

type contractEnv struct {
	base     string
	cfg      Config
	launcher *fakeLauncher
}

func newContractEnv(t *testing.T, jailed, diff bool) *contractEnv {
	t.Helper()
	base, err := os.MkdirTemp("", "fct-") // short: unix socket paths stay under 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	files := map[string]string{
		"bin/firecracker": "#!/bin/sh\necho 'Firecracker v1.16.1'\necho 'second line'\n",
		"img/vmlinux":     "kernel", "img/initrd": "initrd", "img/root.ext4": "ROOT-BASE", "img/bundle.img": "BUNDLE",
	}
	for name, content := range files {
		p := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{
		FirecrackerBinary: filepath.Join(base, "bin/firecracker"), JailerBinary: "/usr/bin/jailer-not-run",
		Kernel: filepath.Join(base, "img/vmlinux"), Initrd: filepath.Join(base, "img/initrd"),
		RootDisk: filepath.Join(base, "img/root.ext4"), BundleDisk: filepath.Join(base, "img/bundle.img"),
		UseJailer: jailed, UID: os.Getuid(), GID: os.Getgid(), ChrootBase: filepath.Join(base, "jail"),
		DiffSnapshots: diff, ReadyTimeout: 20 * time.Second, StopGrace: time.Second,
	}
	return &contractEnv{base: base, cfg: cfg, launcher: &fakeLauncher{}}
}

func (e *contractEnv) backend(t *testing.T) *Backend {
	t.Helper()
	b, err := New(e.cfg, Deps{Logger: slog.New(slog.DiscardHandler), Launcher: e.launcher})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (e *contractEnv) spec(t *testing.T, name string) vmm.Spec {
	t.Helper()
	dir := filepath.Join(e.base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return vmm.Spec{SessionID: "sess-" + name, Epoch: 1, Dir: dir, MemoryMiB: 512, VCPUs: 2,
		Env: map[string]string{"K": "v-" + name}, Hostname: "Host_" + name}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// calls returns the calls fc saw after the first skip ones.
func calls(t *testing.T, fc *fakeFC, skip int) []string {
	t.Helper()
	got, violations, _ := fc.snapshot()
	if len(violations) > 0 {
		t.Errorf("requests violating the published API: %q", violations)
	}
	return got[min(skip, len(got)):]
}

func TestContract(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name                 string
		jailed, diff, rebind bool
	}{
		{"direct full", false, false, false},
		{"direct diff", false, true, true},
		{"jailed full", true, false, true},
		{"jailed diff", true, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newContractEnv(t, tt.jailed, tt.diff)
			b := e.backend(t)
			if c := b.Capabilities(); c.Name != "firecracker" || c.Version != "Firecracker v1.16.1" || c.Acceleration != "kvm" || !c.Isolation || !c.SnapshotMemory || !c.SnapshotDisk || c.RootFS {
				t.Errorf("capabilities = %+v", c)
			}
			spec := e.spec(t, "a")
			m := bootAndCheck(t, e, b, spec)
			n := pauseAndCheck(t, e, m)
			snap := snapshotAndCheck(t, e, m, n, tt.diff)
			destroyAndCheck(t, m)
			restoreAndCheck(t, e, b, snap, tt.diff, tt.rebind)
		})
	}
}

func bootAndCheck(t *testing.T, e *contractEnv, b *Backend, spec vmm.Spec) vmm.Machine {
	t.Helper()
	m, err := b.Boot(ctxT(t), spec)
	if err != nil {
		t.Fatalf("boot: %v", err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	ls, fc, _ := e.launcher.last()
	if got := calls(t, fc, 0); !slices.Equal(got, wantBoot) {
		t.Errorf("boot calls = %q\nwant %q", got, wantBoot)
	}
	_, _, bodies := fc.snapshot()
	mc := bodies["PUT /machine-config"][0]
	if mc["vcpu_count"] != 2.0 || mc["mem_size_mib"] != 512.0 || mc["smt"] != false || (mc["track_dirty_pages"] == true) != e.cfg.DiffSnapshots {
		t.Errorf("machine-config = %v", mc)
	}
	if args := bodies["PUT /boot-source"][0]["boot_args"].(string); !strings.Contains(args, "engrams.port=vsock:1024") || !strings.Contains(args, "engrams.hostname=hosta") {
		t.Errorf("boot_args = %q", args)
	}
	if root, bundle := bodies["PUT /drives/root"][0], bodies["PUT /drives/bundle"][0]; root["is_read_only"] != false || bundle["is_read_only"] != true {
		t.Errorf("drives = %v %v", root, bundle)
	}
	if a := bodies["PUT /actions"][0]["action_type"]; a != "InstanceStart" {
		t.Errorf("action = %v", a)
	}
	if ctl := fc.guest.received(); len(ctl) != 1 || ctl[0].Env["K"] != "v-a" || ctl[0].Hostname != "hosta" || len(ctl[0].Entropy) == 0 {
		t.Errorf("control messages = %+v", ctl)
	}
	checkLaunch(t, e, ls)
	info := m.Info()
	if info.PID <= 0 || info.StartTime == 0 || info.Socket != filepath.Join(ls.Workdir, fileVsock) || info.Dir != spec.Dir {
		t.Errorf("info = %+v", info)
	}
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	if r, err := cl.Ready(ctxT(t)); err != nil || r.BootID != "fake-boot" {
		t.Errorf("ready through Dial = %+v, %v", r, err)
	}
	return m
}

func checkLaunch(t *testing.T, e *contractEnv, ls LaunchSpec) {
	t.Helper()
	if !e.cfg.UseJailer {
		if ls.Path != e.cfg.FirecrackerBinary || !ls.Setsid || ls.Args[0] != "--api-sock" || ls.Args[1] != fileAPI {
			t.Errorf("launch = %+v", ls)
		}
		return
	}
	i := slices.Index(ls.Args, "--")
	if ls.Path != e.cfg.JailerBinary || ls.Setsid || i < 0 || !slices.Equal(ls.Args[i+1:], []string{"--api-sock", fileAPI}) ||
		!slices.Contains(ls.Args, "--daemonize") || !strings.HasPrefix(ls.Workdir, e.cfg.ChrootBase+"/firecracker/") {
		t.Errorf("jailed launch = %+v", ls)
	}
	for _, f := range []string{fileKernel, fileInitrd, fileRoot, fileBundle} {
		if _, err := os.Stat(filepath.Join(ls.Workdir, f)); err != nil {
			t.Errorf("not staged in the jail: %v", err)
		}
	}
}

// pauseAndCheck pauses and resumes the machine; it returns how many API
// calls the machine has seen since it was launched.
func pauseAndCheck(t *testing.T, e *contractEnv, m vmm.Machine) int {
	t.Helper()
	_, fc, _ := e.launcher.last()
	n := len(wantBoot)
	if err := m.Pause(ctxT(t)); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if got := calls(t, fc, n); !slices.Equal(got, wantPause) {
		t.Errorf("pause calls = %q, want %q", got, wantPause)
	}
	n += len(wantPause)
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatalf("resume after pause: %v", err)
	}
	if got := calls(t, fc, n); !slices.Equal(got, wantResume) {
		t.Errorf("resume calls = %q, want %q", got, wantResume)
	}
	_, _, bodies := fc.snapshot()
	if vm := bodies["PATCH /vm"]; len(vm) != 2 || vm[0]["state"] != "Paused" || vm[1]["state"] != "Resumed" {
		t.Errorf("PATCH /vm bodies = %v, want Paused then Resumed", vm)
	}
	return n + len(wantResume)
}

func snapshotAndCheck(t *testing.T, e *contractEnv, m vmm.Machine, n int, diff bool) vmm.Snapshot {
	t.Helper()
	_, fc, _ := e.launcher.last()
	snapDir := filepath.Join(e.base, "snap1")
	snap, err := m.Snapshot(ctxT(t), snapDir)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if got := calls(t, fc, n); !slices.Equal(got, wantSnapshot) {
		t.Errorf("snapshot calls = %q, want %q", got, wantSnapshot)
	}
	checkSnapshotFiles(t, snap, snapDir, "MEM-FULL", "fake-state Full")
	if err := m.Resume(ctxT(t)); err != nil {
		t.Fatalf("resume: %v", err)
	}
	n += len(wantSnapshot)
	if got := calls(t, fc, n); !slices.Equal(got, wantResume) {
		t.Errorf("resume calls = %q, want %q", got, wantResume)
	}
	n += len(wantResume)
	snapDir2 := filepath.Join(e.base, "snap2")
	snap2, err := m.Snapshot(ctxT(t), snapDir2)
	if err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	if got := calls(t, fc, n); !slices.Equal(got, wantSnapshot) {
		t.Errorf("second snapshot calls = %q, want %q", got, wantSnapshot)
	}
	_, _, bodies := fc.snapshot()
	kinds := []any{bodies["PUT /snapshot/create"][0]["snapshot_type"], bodies["PUT /snapshot/create"][1]["snapshot_type"]}
	wantKinds := []any{"Full", "Full"}
	if diff {
		wantKinds[1] = "Diff"
		// The Diff layer is merged onto a copy of the first memory file.
		checkSnapshotFiles(t, snap2, snapDir2, "MEM-FULL", "fake-state Diff")
		mem, _ := os.ReadFile(snap2.Files["memory"])
		if !bytes.HasPrefix(mem[4096:], []byte("MEM-DIFF")) {
			t.Error("diff layer not merged into the memory file")
		}
	}
	if !slices.Equal(kinds, wantKinds) {
		t.Errorf("snapshot types = %v, want %v", kinds, wantKinds)
	}
	return snap2
}

func checkSnapshotFiles(t *testing.T, snap vmm.Snapshot, dir, mem, state string) {
	t.Helper()
	if snap.Backend != "firecracker" || len(snap.Files) != 3 {
		t.Errorf("snapshot = %+v", snap)
	}
	want := map[string]string{"memory": mem, "state": state, "disk": "ROOT-BASE"}
	for role, prefix := range want {
		p := snap.Files[role]
		b, err := os.ReadFile(p)
		if err != nil || !strings.HasPrefix(p, dir+"/") || !bytes.HasPrefix(b, []byte(prefix)) {
			t.Errorf("snapshot file %s = %s: %.20q, %v; want %q inside %s", role, p, b, err, prefix, dir)
		}
	}
}

func destroyAndCheck(t *testing.T, m vmm.Machine) {
	t.Helper()
	info := m.Info()
	if err := m.Destroy(ctxT(t)); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	select {
	case <-m.Done():
	default:
		t.Error("Done open after Destroy")
	}
	if vmproc.Alive(info.PID, info.StartTime) {
		t.Errorf("pid %d still running", info.PID)
	}
	work := filepath.Dir(info.Socket)
	for _, p := range []string{info.Socket, filepath.Join(work, fileAPI), filepath.Join(work, fileRoot), filepath.Join(work, fileLog), filepath.Join(info.Dir, fileMachine)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after Destroy (%v)", p, err)
		}
	}
	if err := m.Destroy(ctxT(t)); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
}

func restoreAndCheck(t *testing.T, e *contractEnv, b *Backend, snap vmm.Snapshot, diff, rebind bool) {
	t.Helper()
	spec := e.spec(t, "b")
	spec.Rebind = rebind
	m, err := b.Restore(ctxT(t), spec, snap)
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	t.Cleanup(func() { _ = m.Destroy(context.Background()) })
	_, fc, _ := e.launcher.last()
	if got := calls(t, fc, 0); !slices.Equal(got, wantLoad) {
		t.Errorf("restore calls = %q, want %q", got, wantLoad)
	}
	_, _, bodies := fc.snapshot()
	ld := bodies["PUT /snapshot/load"][0]
	mb, _ := ld["mem_backend"].(map[string]any)
	if ld["snapshot_path"] != fileState || mb["backend_type"] != "File" || mb["backend_path"] != fileMem || ld["resume_vm"] != true || (ld["track_dirty_pages"] == true) != diff {
		t.Errorf("snapshot/load = %v", ld)
	}
	if ctl := fc.guest.received(); len(ctl) != 1 || ctl[0].Env["K"] != "v-b" || ctl[0].TimeUnixNano == 0 || ctl[0].RestartGuest != rebind {
		t.Errorf("control after restore (rebind %v) = %+v", rebind, ctl)
	}
	m2, err := e.backend(t).Recover(ctxT(t), spec.Dir)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if m2.Info().PID != m.Info().PID {
		t.Errorf("recovered pid %d, want %d", m2.Info().PID, m.Info().PID)
	}
	if c, err := m2.Dial(ctxT(t)); err != nil {
		t.Errorf("dial recovered: %v", err)
	} else {
		c.Close()
	}
	destroyAndCheck(t, m2)
	<-m.Done()
	if _, err := e.backend(t).Recover(ctxT(t), spec.Dir); !errors.Is(err, vmm.ErrGone) {
		t.Errorf("recover after destroy = %v, want ErrGone", err)
	}
}
