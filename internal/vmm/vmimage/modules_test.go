package vmimage

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolveModules(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dep := `kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_mmio.ko: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/net/core/failover.ko.xz:
kernel/drivers/net/net_failover.ko.xz: kernel/net/core/failover.ko.xz
kernel/drivers/net/virtio_net.ko.xz: kernel/drivers/net/net_failover.ko.xz kernel/net/core/failover.ko.xz kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
`
	os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(dep), 0o644)
	os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644)
	mods, err := ResolveModules(dir, []string{"virtio_mmio", "virtio-net", "ext4"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mods {
		got = append(got, m.Name)
	}
	want := []string{"virtio_ring", "virtio", "virtio_mmio", "failover", "net_failover", "virtio_net"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if _, err := ResolveModules(dir, []string{"nope"}); err == nil {
		t.Error("unknown module: want an error")
	}
}
