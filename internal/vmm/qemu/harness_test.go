package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/testutil"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// TestLaunchHarnessDisk checks the harness disk is a read-only drive with
// its serial, right after the bundle disk, and absent without one (a
// machine restored from an older snapshot).
func TestLaunchHarnessDisk(t *testing.T) {
	t.Parallel()
	l := launch{Accel: "tcg", MemoryMiB: 256, VCPUs: 1, Kernel: "/k", Initramfs: "/i", Bundle: "/b",
		Disk: "/d/disk.qcow2", Memory: "/d/memory.ram", PIDFile: "/d/qemu.pid", Cmdline: "quiet", Name: "s1"}
	without := strings.Join(l.args(), " ")
	if strings.Contains(without, "harness") {
		t.Errorf("args without a harness disk name one:\n%s", without)
	}
	l.Harness = "/d/harness.qcow2"
	with := strings.Join(l.args(), " ")
	want := "-device virtio-blk-device,drive=bundle,serial=engrams-bundle " +
		"-drive id=harness,file=/d/harness.qcow2,format=qcow2,if=none,readonly=on " +
		"-device virtio-blk-device,drive=harness,serial=engrams-harness -device virtio-serial-device"
	if !strings.Contains(with, want) {
		t.Errorf("args lack %q:\n%s", want, with)
	}
	if strings.Replace(with, want, "-device virtio-blk-device,drive=bundle,serial=engrams-bundle -device virtio-serial-device", 1) != without {
		t.Error("the harness disk changes more than its own arguments")
	}
}

// TestSnapConfigHarness checks the config file's harness record: format 4
// carries it, format 3 (older snapshots) has none and still reads.
func TestSnapConfigHarness(t *testing.T) {
	t.Parallel()
	b := &Backend{version: "QEMU 7.2", accel: "tcg"}
	read := func(cfg string) (snapConfigFile, error) {
		p := filepath.Join(t.TempDir(), "config")
		if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		snap := vmm.Snapshot{Backend: "qemu", Files: map[string]string{"config": p, "memory": p, "state": p, "disk": p}}
		return b.readSnapConfig(vmm.Spec{Dir: "/abs"}, snap)
	}
	tests := []struct {
		name    string
		cfg     string
		harness *snapHarness
		err     string
	}{
		{"format 3 without harness", `{"format":3,"qemu_version":"QEMU 7.2","accel":"tcg"}`, nil, ""},
		{"format 4 with harness", `{"format":4,"qemu_version":"QEMU 7.2","accel":"tcg","harness":{"id":"sha256:h","disk_bytes":8589934592}}`,
			&snapHarness{ID: "sha256:h", DiskBytes: 8 << 30}, ""},
		{"format 4 without harness", `{"format":4,"qemu_version":"QEMU 7.2","accel":"tcg"}`, nil, "only it has one"},
		{"format 3 with harness", `{"format":3,"qemu_version":"QEMU 7.2","accel":"tcg","harness":{"id":"x","disk_bytes":1}}`, nil, "only it has one"},
		{"harness without size", `{"format":4,"qemu_version":"QEMU 7.2","accel":"tcg","harness":{"id":"x"}}`, nil, "without an ID or size"},
		{"format 5", `{"format":5,"qemu_version":"QEMU 7.2","accel":"tcg"}`, nil, "this host reads 3 and 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := read(tt.cfg)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("read = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (cfg.Harness == nil) != (tt.harness == nil) || cfg.Harness != nil && *cfg.Harness != *tt.harness {
				t.Errorf("harness = %+v, want %+v", cfg.Harness, tt.harness)
			}
		})
	}
	data, _ := json.Marshal(snapConfigFile{Format: snapFormat, Harness: snapHarnessOf(&harnessDisk{Image: "/host/path", ID: "sha256:h", DiskBytes: 5})})
	if strings.Contains(string(data), "/host/path") || !strings.Contains(string(data), `"harness":{"id":"sha256:h","disk_bytes":5}`) {
		t.Errorf("config = %s", data)
	}
}

// TestRestoreHarness covers which harness disk a restore attaches and
// when the guest must mount it again.
func TestRestoreHarness(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	placeholder := filepath.Join(dir, "placeholder.erofs")
	bundle := filepath.Join(dir, "v1.erofs")
	for _, p := range []string{placeholder, bundle} {
		if err := os.WriteFile(p, []byte(filepath.Base(p)), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	b := &Backend{cfg: Config{Images: vmimage.Images{Harness: placeholder}}}
	_, pid, err := b.harnessImage(nil, harnessDiskBytes)
	if err != nil || !strings.HasPrefix(pid, placeholderPrefix) {
		t.Fatalf("placeholder identity %q, %v", pid, err)
	}
	v1 := &vmm.RootFS{Path: bundle, ID: "sha256:v1"}
	onPlaceholder := &snapHarness{ID: pid, DiskBytes: harnessDiskBytes}
	onV1 := &snapHarness{ID: "sha256:v1", DiskBytes: harnessDiskBytes}
	tests := []struct {
		name        string
		saved       *snapHarness
		spec        vmm.Spec
		image       string // "" for no harness disk
		remount     bool
		unsupported bool
	}{
		{"older snapshot, no harness", nil, vmm.Spec{}, "", false, false},
		{"older snapshot, harness", nil, vmm.Spec{Harness: v1, Rebind: true}, "", false, true},
		{"placeholder again", onPlaceholder, vmm.Spec{}, placeholder, false, false},
		{"base gets a harness", onPlaceholder, vmm.Spec{Harness: v1, Rebind: true}, bundle, true, false},
		{"session keeps its harness", onV1, vmm.Spec{Harness: v1}, bundle, false, false},
		{"session changes its harness", onPlaceholder, vmm.Spec{Harness: v1}, "", false, true},
		{"session loses its harness", onV1, vmm.Spec{}, "", false, true},
		{"rebind drops the harness", onV1, vmm.Spec{Rebind: true}, placeholder, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, remount, err := b.restoreHarness(tt.saved, tt.spec)
			if tt.unsupported {
				if !errors.Is(err, vmm.ErrUnsupported) {
					t.Fatalf("err = %v, want ErrUnsupported", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if h != nil {
				got = h.Image
			}
			if got != tt.image || remount != tt.remount {
				t.Errorf("image %q remount %v, want %q %v", got, remount, tt.image, tt.remount)
			}
		})
	}
}

// harnessImageFile builds an erofs harness image holding a file "version".
func harnessImageFile(t *testing.T, version string) *vmm.RootFS {
	t.Helper()
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
	}
	tree := filepath.Join(t.TempDir(), "tree")
	if err := os.MkdirAll(tree, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tree, "version"), []byte(version+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(t.TempDir(), version+".erofs")
	if out, err := exec.Command(mkfs, "-T", "1700000000", "--all-root", img, tree).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.erofs: %v: %s", err, out)
	}
	return &vmm.RootFS{Path: img, ID: "sha256:" + fileSHA256(t, img)}
}

// TestHarnessBootAndRebind boots a machine with a harness bundle, then
// snapshots a caller's root filesystem booted without one (an image's
// base) and restores it with Rebind into two sessions, each with its own
// harness version, and refuses another harness without Rebind.
func TestHarnessBootAndRebind(t *testing.T) {
	im := testImages(t)
	v1, v2 := harnessImageFile(t, "v1"), harnessImageFile(t, "v2")
	root := treeRootFS(t, im)
	rootFS := &vmm.RootFS{Path: root, ID: "sha256:" + fileSHA256(t, root)}
	b := newTestBackend(t)
	acquireGuest(t)
	acquireGuest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	t0 := time.Now()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: "harness-boot", Dir: t.TempDir(), Harness: v1})
	if err != nil {
		t.Fatalf("boot with harness: %v", err)
	}
	t.Logf("boot with harness → ready %.2fs", time.Since(t0).Seconds())
	if got := execOut(t, m, "cat", "/.engrams-harness/version"); got != "v1" {
		t.Errorf("harness version = %q, want v1", got)
	}
	if got := execOut(t, m, "sh", "-c", "echo x > /.engrams-harness/w 2>/dev/null && echo writable || echo read-only"); got != "read-only" {
		t.Errorf("harness mount is %s", got)
	}
	if err := m.Destroy(ctx); err != nil {
		t.Fatal(err)
	}

	base, err := b.Boot(ctx, vmm.Spec{SessionID: "harness-base", Dir: t.TempDir(), RootFS: rootFS})
	if err != nil {
		t.Fatalf("boot base: %v", err)
	}
	defer base.Destroy(context.Background())
	if got := execOut(t, base, "sh", "-c", "ls -A /.engrams-harness | wc -l; cat /marker"); got != "0\n"+rootMarker {
		t.Errorf("base without harness: entries and marker = %q", got)
	}
	snap, err := base.Snapshot(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("snapshot base: %v", err)
	}
	if err := base.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = b.Restore(ctx, vmm.Spec{SessionID: "no-rebind", Dir: t.TempDir(), RootFS: rootFS, Harness: v1}, copySnapshot(t, snap))
	if !errors.Is(err, vmm.ErrUnsupported) {
		t.Errorf("restore with another harness without Rebind = %v, want ErrUnsupported", err)
	}
	for _, h := range []struct {
		name string
		fs   *vmm.RootFS
	}{{"v1", v1}, {"v2", v2}} {
		t0 := time.Now()
		r, err := b.Restore(ctx, vmm.Spec{SessionID: "rebind-" + h.name, Dir: t.TempDir(), RootFS: rootFS,
			Harness: h.fs, Rebind: true, Env: map[string]string{"ENGRAMS_T": h.name}}, copySnapshot(t, snap))
		if err != nil {
			t.Fatalf("restore with harness %s: %v", h.name, err)
		}
		defer r.Destroy(context.Background())
		t.Logf("rebind restore with harness %s → ready %.2fs", h.name, time.Since(t0).Seconds())
		if got := execOut(t, r, "sh", "-c", "cat /.engrams-harness/version; echo $ENGRAMS_T; cat /marker"); got != h.name+"\n"+h.name+"\n"+rootMarker {
			t.Errorf("restore %s: harness version, env, marker = %q", h.name, got)
		}
		if st := r.(*machine).st; st.Harness == nil || st.Harness.ID != h.fs.ID {
			t.Errorf("restore %s: state harness %+v", h.name, st.Harness)
		}
	}
}
