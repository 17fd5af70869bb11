package qemu

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/engrams/engrams/internal/guestinit/initproto"
	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmimage"
)

const rootMarker = "engrams-rootfs-marker"

// treeRootFS builds a caller's root filesystem as image materialization
// does (vmimage TreeImage over a flattened tree): static busybox, the
// directories init and the daemon need, and /marker.
func treeRootFS(t *testing.T, im vmimage.Images) string {
	t.Helper()
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("no busybox binary (scripts/install-deps.sh installs busybox-static)")
	}
	tree := filepath.Join(t.TempDir(), "tree")
	writeBusyboxTree(t, busybox, tree)
	b, err := vmimage.New(vmimage.Config{CacheDir: t.TempDir(), KernelImage: im.Kernel}, vmimage.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "rootfs.ext4")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := b.TreeImage(ctx, vmimage.TreeImageSpec{Dir: tree, Path: p, SizeBytes: 256 << 20, Seed: "sha256:rootfs-test"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o444); err != nil { // shared: nobody writes it
		t.Fatal(err)
	}
	return p
}

func writeBusyboxTree(t *testing.T, busybox, root string) {
	t.Helper()
	out, err := exec.Command(busybox, "--list-full").Output()
	if err != nil {
		t.Fatalf("busybox --list-full: %v", err)
	}
	for _, d := range []string{"bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "run", "tmp", "root", "etc", "var/log"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyTestFile(busybox, filepath.Join(root, "bin/busybox")); err != nil {
		t.Fatal(err)
	}
	for _, a := range strings.Fields(string(out)) {
		if a == "bin/busybox" {
			continue
		}
		dst := filepath.Join(root, a)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/bin/busybox", dst); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"marker": rootMarker + "\n", "etc/passwd": "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group": "root:x:0:\n", "etc/hostname": "tree\n",
	}
	for f, c := range files {
		if err := os.WriteFile(filepath.Join(root, f), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// daemonStarts counts the guest daemon starts init logged.
func daemonStarts(t *testing.T, m vmm.Machine) int {
	t.Helper()
	n, err := strconv.Atoi(execOut(t, m, "sh", "-c", "grep -c 'guest daemon started' "+initproto.InitLog+" || true"))
	if err != nil {
		t.Fatalf("count daemon starts: %v", err)
	}
	return n
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// copySnapshot gives one restore its own copy of snap's files (a restore
// uses "memory" as the machine's live RAM: a set of files restores once).
func copySnapshot(t *testing.T, snap vmm.Snapshot) vmm.Snapshot {
	t.Helper()
	dir := t.TempDir()
	out := snap
	out.Files = map[string]string{}
	for role, p := range snap.Files {
		np := filepath.Join(dir, role)
		if err := vmimage.CloneFile(p, np); err != nil {
			t.Fatal(err)
		}
		out.Files[role] = np
	}
	return out
}

// TestRootFSBaseSnapshot boots a caller's root filesystem, takes a base
// snapshot, and restores it twice with Rebind, as sessions of one image
// do: each clone has its own env, hostname and copy-on-write layer, and
// the shared image file never changes.
func TestRootFSBaseSnapshot(t *testing.T) {
	im := testImages(t)
	root := treeRootFS(t, im)
	sum := fileSHA256(t, root)
	b := newTestBackend(t)
	acquireGuest(t)
	acquireGuest(t) // two clones run at once
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	id := "sha256:" + sum // the caller's identity (here: of the file itself)
	snap := baseSnapshot(ctx, t, b, &vmm.RootFS{Path: root, ID: id})
	checkRootFSRefusals(ctx, t, b, snap, root, id)

	clones := map[string]vmm.Machine{}
	for _, name := range []string{"one", "two"} {
		spec := vmm.Spec{SessionID: "clone-" + name, Dir: t.TempDir(), Hostname: "host-" + name, Rebind: true,
			Env: map[string]string{"ENGRAMS_T": name}, RootFS: &vmm.RootFS{Path: root, ID: id}}
		own := copySnapshot(t, snap)
		t0 := time.Now()
		m, err := b.Restore(ctx, spec, own)
		if err != nil {
			t.Fatalf("restore %s with rebind: %v", name, err)
		}
		defer m.Destroy(context.Background())
		t.Logf("rebind restore %s → ready %.3fs", name, time.Since(t0).Seconds())
		clones[name] = m
		if got := execOut(t, m, "sh", "-c", "echo $ENGRAMS_T; hostname"); got != name+"\nhost-"+name {
			t.Errorf("clone %s: env and hostname = %q", name, got)
		}
		if got := execOut(t, m, "cat", "/marker", "/root/written"); got != rootMarker+"\nbefore-snapshot" {
			t.Errorf("clone %s: marker and file written before the snapshot = %q", name, got)
		}
		if got := daemonStarts(t, m); got != 2 { // at boot, and once by the rebind
			t.Errorf("clone %s: guest daemon started %d times, want 2", name, got)
		}
		if st := m.(*machine).st; st.RootFSID != id || st.Images.RootFS != root {
			t.Errorf("clone %s state: rootfs %s id %q", name, st.Images.RootFS, st.RootFSID)
		}
	}
	execOut(t, clones["one"], "sh", "-c", "echo mine > /root/one-only && sync")
	if got := execOut(t, clones["two"], "sh", "-c", "test -e /root/one-only && echo seen || echo unseen"); got != "unseen" {
		t.Errorf("clone two sees clone one's write: %q", got)
	}
	checkRecoverKeepsRootFS(ctx, t, b, clones["one"], id)
	for name, m := range clones {
		if err := m.Destroy(ctx); err != nil {
			t.Fatalf("destroy clone %s: %v", name, err)
		}
	}
	plainRestore(ctx, t, b, snap, root, id)
	if got := fileSHA256(t, root); got != sum {
		t.Errorf("shared root filesystem changed: sha256 %s, was %s", got, sum)
	}
}

// baseSnapshot boots root, checks it is the root, writes a file and
// snapshots the machine, then destroys it.
func baseSnapshot(ctx context.Context, t *testing.T, b *Backend, root *vmm.RootFS) vmm.Snapshot {
	t.Helper()
	m, err := b.Boot(ctx, vmm.Spec{SessionID: "base", Dir: t.TempDir(), MemoryMiB: 256, VCPUs: 1,
		Hostname: "base", Env: map[string]string{"ENGRAMS_T": "base"}, RootFS: root})
	if err != nil {
		t.Fatalf("boot with rootfs: %v", err)
	}
	defer m.Destroy(context.Background())
	if got := execOut(t, m, "cat", "/marker"); got != rootMarker {
		t.Fatalf("/marker = %q, want %q", got, rootMarker)
	}
	execOut(t, m, "sh", "-c", "echo before-snapshot > /root/written")
	cl := guestapi.NewClient(m.Dial)
	defer cl.Close()
	if err := cl.Sync(ctx); err != nil {
		t.Fatalf("guest sync: %v", err)
	}
	snap, err := m.Snapshot(ctx, t.TempDir())
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := m.Destroy(ctx); err != nil {
		t.Fatalf("destroy base: %v", err)
	}
	var cfg snapConfigFile
	data, _ := os.ReadFile(snap.Files["config"])
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	want := imageRef{Name: filepath.Base(root.Path), ID: root.ID}
	if got := cfg.Images["rootfs"]; got != want || cfg.Images["kernel"].SHA256 == "" {
		t.Errorf("snapshot config images = %+v, want rootfs %+v", cfg.Images, want)
	}
	if strings.Contains(string(data), filepath.Dir(root.Path)) {
		t.Errorf("snapshot config names the root filesystem's directory: %s", data)
	}
	return snap
}

// checkRootFSRefusals restores snap without its root filesystem, and
// with another one: both fail before QEMU starts, with ErrUnsupported.
func checkRootFSRefusals(ctx context.Context, t *testing.T, b *Backend, snap vmm.Snapshot, root, id string) {
	t.Helper()
	tests := []struct {
		name string
		root *vmm.RootFS
		want string
	}{
		{"no rootfs", nil, id},
		{"other id", &vmm.RootFS{Path: root, ID: "sha256:other"}, "sha256:other"},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		_, err := b.Restore(ctx, vmm.Spec{SessionID: "refused", Dir: dir, RootFS: tt.root, Rebind: true}, snap)
		if !errors.Is(err, vmm.ErrUnsupported) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: restore = %v, want ErrUnsupported naming %s", tt.name, err, tt.want)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("%s: refused restore left files: %v", tt.name, entries)
		}
	}
}

// checkRecoverKeepsRootFS reattaches to m as a restarted host agent does:
// its state still names the caller's root filesystem.
func checkRecoverKeepsRootFS(ctx context.Context, t *testing.T, b *Backend, m vmm.Machine, id string) {
	t.Helper()
	r, err := b.Recover(ctx, m.Info().Dir)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if st := r.(*machine).st; st.RootFSID != id {
		t.Errorf("recovered state rootfs id %q, want %q", st.RootFSID, id)
	}
	if got := execOut(t, r, "cat", "/root/one-only"); got != "mine" {
		t.Errorf("recovered clone: /root/one-only = %q", got)
	}
	if err := r.Destroy(ctx); err != nil {
		t.Fatalf("destroy recovered clone: %v", err)
	}
}

// plainRestore restores snap without Rebind, for comparison: the daemon
// keeps the snapshot's environment.
func plainRestore(ctx context.Context, t *testing.T, b *Backend, snap vmm.Snapshot, root, id string) {
	t.Helper()
	own := copySnapshot(t, snap)
	t0 := time.Now()
	m, err := b.Restore(ctx, vmm.Spec{SessionID: "plain", Dir: t.TempDir(), Hostname: "plain",
		Env: map[string]string{"ENGRAMS_T": "plain"}, RootFS: &vmm.RootFS{Path: root, ID: id}}, own)
	if err != nil {
		t.Fatalf("plain restore: %v", err)
	}
	defer m.Destroy(context.Background())
	t.Logf("plain restore → ready %.3fs", time.Since(t0).Seconds())
	if got := execOut(t, m, "sh", "-c", "echo $ENGRAMS_T; cat /root/written"); got != "base\nbefore-snapshot" {
		t.Errorf("plain restore: env and file = %q, want the snapshot's env", got)
	}
	if got := daemonStarts(t, m); got != 1 {
		t.Errorf("plain restore: guest daemon started %d times, want 1 (at boot)", got)
	}
	if err := m.Destroy(ctx); err != nil {
		t.Fatalf("destroy plain restore: %v", err)
	}
}

// TestCheckRootFS checks what Boot and Restore accept as a caller's root
// filesystem, without QEMU.
func TestCheckRootFS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	img := filepath.Join(dir, "root.ext4")
	if err := os.WriteFile(img, make([]byte, 4096), 0o444); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.ext4")
	if err := os.WriteFile(empty, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(mustGetwd(t), img)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		root vmm.RootFS
		want string // path returned, or part of the error
		ok   bool
	}{
		{"image", vmm.RootFS{Path: img, ID: "sha256:a"}, img, true},
		{"relative path made absolute", vmm.RootFS{Path: rel, ID: "sha256:a"}, img, true},
		{"no id", vmm.RootFS{Path: img}, "needs a path and an ID", false},
		{"no path", vmm.RootFS{ID: "sha256:a"}, "needs a path and an ID", false},
		{"missing", vmm.RootFS{Path: img + ".no", ID: "sha256:a"}, "no such file", false},
		{"directory", vmm.RootFS{Path: dir, ID: "sha256:a"}, "not a raw image file", false},
		{"empty file", vmm.RootFS{Path: empty, ID: "sha256:a"}, "not a raw image file", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := checkRootFS(&tt.root)
			switch {
			case tt.ok && (err != nil || got != tt.want):
				t.Errorf("checkRootFS = %q, %v; want %q", got, err, tt.want)
			case !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("checkRootFS = %q, %v; want an error with %q", got, err, tt.want)
			}
		})
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
