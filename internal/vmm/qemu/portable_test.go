package qemu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

// hostBImages builds a second image set, as another host would: its own
// cache directory, from copies of the same inputs stored elsewhere.
func hostBImages(t *testing.T, a vmimage.Images) vmimage.Images {
	t.Helper()
	cache := filepath.Join(os.TempDir(), "engrams-qemu-test-host-b")
	bin := filepath.Join(cache, "inputs")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	srcBin := filepath.Join(os.TempDir(), "engrams-qemu-test", "bin")
	for _, name := range []string{"engrams-init", "engrams-guest"} {
		if err := copyTestFile(filepath.Join(srcBin, name), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b, err := buildImagesIn(ctx, cache, bin)
	if err != nil {
		t.Fatalf("build host B images: %v", err)
	}
	for _, role := range imageRoles {
		pa, pb := *imagePath(&a, role), *imagePath(&b, role)
		if filepath.Base(pa) != filepath.Base(pb) || filepath.Dir(pa) == filepath.Dir(pb) {
			t.Fatalf("%s image: host A %s, host B %s: want the same name in another directory", role, pa, pb)
		}
	}
	return b
}

func copyTestFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestRestoreOnAnotherHost snapshots a machine on "host A" (its own data
// dir and image cache), moves the snapshot files as chunk restore would,
// and restores them on "host B" (another data dir and image cache): the
// background process keeps its PID and a file written before is there.
func TestRestoreOnAnotherHost(t *testing.T) {
	imA := testImages(t)
	imB := hostBImages(t, imA)
	acquireGuest(t) // one guest at a time: A is destroyed before B restores
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hostA, hostB := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(hostA, "vm"), filepath.Join(hostB, "vm")} {
		if err := os.Mkdir(d, 0o755); err != nil { // Spec.Dir is the caller's
			t.Fatal(err)
		}
	}
	bA := newBackendWith(t, imA, filepath.Join(hostA, "data"))
	m, err := bA.Boot(ctx, vmm.Spec{SessionID: "move", Dir: filepath.Join(hostA, "vm"), MemoryMiB: 256, VCPUs: 1, Hostname: "mover"})
	if err != nil {
		t.Fatalf("boot on host A: %v", err)
	}
	defer m.Destroy(context.Background())
	execOut(t, m, "sh", "-c", "echo moved-with-me > /root/marker")
	pid := execOut(t, m, "sh", "-c",
		`setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.1; done' >/dev/null 2>&1 & echo $!`)
	time.Sleep(500 * time.Millisecond)
	before := execOut(t, m, "cat", "/tmp/c")
	cl := guestapi.NewClient(m.Dial)
	if err := cl.Sync(ctx); err != nil {
		t.Fatalf("guest sync: %v", err)
	}
	cl.Close()
	snapDir := filepath.Join(hostA, "snap")
	t0 := time.Now()
	snap, err := m.Snapshot(ctx, snapDir)
	if err != nil {
		t.Fatalf("snapshot on host A: %v", err)
	}
	t.Logf("snapshot %.3fs", time.Since(t0).Seconds())
	if err := m.Destroy(ctx); err != nil {
		t.Fatalf("destroy on host A: %v", err)
	}
	for _, role := range []string{"config", "disk"} {
		b, _ := os.ReadFile(snap.Files[role])
		for _, dir := range []string{hostA, filepath.Dir(imA.RootFS)} {
			if bytes.Contains(b, []byte(dir)) {
				t.Errorf("snapshot %s file names host A's directory %s", role, dir)
			}
		}
	}
	moved := moveSnapshot(t, snap, filepath.Join(hostB, "chunks"))

	bB := newBackendWith(t, imB, filepath.Join(hostB, "data"))
	t0 = time.Now()
	r, err := bB.Restore(ctx, vmm.Spec{SessionID: "move", Dir: filepath.Join(hostB, "vm"), Hostname: "mover"}, moved)
	if err != nil {
		t.Fatalf("restore on host B: %v", err)
	}
	defer r.Destroy(context.Background())
	t.Logf("restore on host B → ready %.3fs", time.Since(t0).Seconds())
	if got := execOut(t, r, "sh", "-c", "kill -0 "+pid+" && echo alive"); got != "alive" {
		t.Errorf("background process %s after restore on host B: %q", pid, got)
	}
	if got := execOut(t, r, "cat", "/root/marker"); got != "moved-with-me" {
		t.Errorf("file written on host A = %q", got)
	}
	after := execOut(t, r, "cat", "/tmp/c")
	t.Logf("counter %s on host A → %s on host B", before, after)
	checkUsesOnly(t, r, filepath.Dir(imB.RootFS), filepath.Dir(imA.RootFS))
	if err := r.Destroy(ctx); err != nil {
		t.Fatalf("destroy on host B: %v", err)
	}
}

// moveSnapshot moves snap's files into dir under other names.
func moveSnapshot(t *testing.T, snap vmm.Snapshot, dir string) vmm.Snapshot {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out := snap
	out.Files = map[string]string{}
	for role, p := range snap.Files {
		np := filepath.Join(dir, "chunked-"+role)
		if err := os.Rename(p, np); err != nil {
			t.Fatal(err)
		}
		out.Files[role] = np
	}
	return out
}

// checkUsesOnly checks the restored machine's disk and QEMU command line
// refer to the local image cache, never the capturing host's.
func checkUsesOnly(t *testing.T, m vmm.Machine, local, foreign string) {
	t.Helper()
	info := m.Info()
	out, err := exec.Command("qemu-img", "info", "-U", filepath.Join(info.Dir, fileDisk)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "backing file: "+local+"/") {
		t.Errorf("restored disk's backing file is not in %s: %v\n%s", local, err, out)
	}
	cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(info.PID), "cmdline"))
	if bytes.Contains(cmdline, []byte(foreign+"/")) || !bytes.Contains(cmdline, []byte(local)) {
		t.Errorf("qemu command line %q: want images from %s only", bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), local)
	}
}

// TestRestoreRefusals checks restores that cannot work fail before QEMU
// starts, with the reason: a RAM size other than the snapshot's, and an
// image the local cache lacks.
func TestRestoreRefusals(t *testing.T) {
	im := testImages(t)
	dir := t.TempDir()
	b := newBackendWith(t, im, filepath.Join(dir, "data"))
	refs, err := b.imageRefs(im, "")
	if err != nil {
		t.Fatal(err)
	}
	write := func(cfg snapConfigFile) vmm.Snapshot { return writeSnapConfig(t, cfg) }
	_, placeholder, err := b.harnessImage(nil, harnessDiskBytes)
	if err != nil {
		t.Fatal(err)
	}
	good := snapConfigFile{Format: snapFormat, QEMUVersion: b.version, Accel: b.accel, MemoryMiB: 256, VCPUs: 1, Images: refs,
		Harness: &snapHarness{ID: placeholder, DiskBytes: harnessDiskBytes}}
	old := good // before harness disks
	old.Format, old.Harness = snapFormatNoHarness, nil
	noDisk := good
	noDisk.Harness = nil
	smallDisk := good
	smallDisk.Harness = &snapHarness{ID: placeholder, DiskBytes: 1024}
	harnessFile := writeBlankImage(t, filepath.Join(dir, "harness.erofs"))
	v1 := &vmm.RootFS{Path: harnessFile, ID: "sha256:harness-v1"}
	missing := good
	missing.Images = withRootFSRef(refs, imageRef{Name: "rootfs-busybox-000000000000000000000000.ext4", SHA256: "ab"})
	caller := good
	caller.Images = withRootFSRef(refs, imageRef{Name: "image.ext4", ID: "sha256:image"})
	rootFile := writeBlankImage(t, filepath.Join(dir, "image.ext4"))
	other := &vmm.RootFS{Path: rootFile, ID: "sha256:other"}
	tests := []restoreRefusal{
		{"ram size", vmm.Spec{MemoryMiB: 512}, write(good), "cannot change its RAM size", false},
		{"vcpus", vmm.Spec{VCPUs: 2}, write(good), "cannot change its vCPU count", false},
		{"missing image", vmm.Spec{}, write(missing), "rootfs image rootfs-busybox-000000000000000000000000.ext4", true},
		{"other qemu", vmm.Spec{}, write(snapConfigFile{Format: snapFormat, QEMUVersion: "QEMU 1.0"}), "this host runs", true},
		{"rootfs missing", vmm.Spec{}, write(caller), `needs Spec.RootFS with that ID`, true},
		{"rootfs other id", vmm.Spec{RootFS: other}, write(caller), `Spec.RootFS is "sha256:other"`, true},
		{"rootfs on default root", vmm.Spec{RootFS: other}, write(good), "ran on the default root image", true},
		{"rootfs file gone", vmm.Spec{RootFS: &vmm.RootFS{Path: rootFile + ".gone", ID: "sha256:image"}}, write(caller), "no such file", false},
		{"harness on an older snapshot", vmm.Spec{Harness: v1, Rebind: true}, write(old), "predates harness disks", true},
		{"other harness without rebind", vmm.Spec{Harness: v1}, write(good), "only a Rebind restore changes it", true},
		{"format 4 without harness disk", vmm.Spec{}, write(noDisk), "only it has one", false},
		{"harness larger than the disk", vmm.Spec{Harness: v1, Rebind: true}, write(smallDisk), "more than the harness disk's 1024", false},
		{"harness without id", vmm.Spec{Harness: &vmm.RootFS{Path: harnessFile}, Rebind: true}, write(good), "needs a path and an ID", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			checkRestoreRefused(t, b, tt)
		})
	}
}

// restoreRefusal is a restore that must fail before QEMU starts.
type restoreRefusal struct {
	name        string
	spec        vmm.Spec
	snap        vmm.Snapshot
	want        string // in the error
	unsupported bool   // the error is vmm.ErrUnsupported
}

// checkRestoreRefused restores tt with b into a fresh directory: it must
// fail with tt.want, be ErrUnsupported as tt says, and leave no files.
func checkRestoreRefused(t *testing.T, b *Backend, tt restoreRefusal) {
	t.Helper()
	tt.spec.SessionID, tt.spec.Dir = "refuse", t.TempDir()
	_, err := b.Restore(context.Background(), tt.spec, tt.snap)
	if err == nil || !strings.Contains(err.Error(), tt.want) {
		t.Fatalf("restore = %v, want %q", err, tt.want)
	}
	if errors.Is(err, vmm.ErrUnsupported) != tt.unsupported {
		t.Errorf("error %v: ErrUnsupported %v, want %v", err, !tt.unsupported, tt.unsupported)
	}
	if entries, _ := os.ReadDir(tt.spec.Dir); len(entries) != 0 {
		t.Errorf("a refused restore left files: %v", entries)
	}
}

// writeSnapConfig writes cfg as a snapshot's config file and returns a
// snapshot whose every file is that one.
func writeSnapConfig(t *testing.T, cfg snapConfigFile) vmm.Snapshot {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config")
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return vmm.Snapshot{Backend: "qemu", Files: map[string]string{"config": p, "memory": p, "state": p, "disk": p}}
}

// writeBlankImage writes 4 KiB of zeros, read-only, at path and returns it.
func writeBlankImage(t *testing.T, path string) string {
	t.Helper()
	if err := os.WriteFile(path, make([]byte, 4096), 0o444); err != nil {
		t.Fatal(err)
	}
	return path
}

// withRootFSRef is a copy of refs with its rootfs image replaced by rootfs.
func withRootFSRef(refs map[string]imageRef, rootfs imageRef) map[string]imageRef {
	out := map[string]imageRef{}
	for k, v := range refs {
		out[k] = v
	}
	out["rootfs"] = rootfs
	return out
}
