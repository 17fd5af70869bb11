package vmimage

import (
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/testutil"
)

// TestHarnessPlaceholderReproducible checks the empty harness image is an
// erofs image, the same bytes from two caches, and cached by its inputs.
func TestHarnessPlaceholderReproducible(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		testutil.SkipOrFail(t, "mkfs.erofs not found (scripts/install-deps.sh installs erofs-utils): %v", err)
	}
	var sums []string
	var names []string
	for i := 0; i < 2; i++ {
		b, err := New(Config{CacheDir: t.TempDir(), KernelImage: "/unused"}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.HarnessPlaceholder(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		again, err := b.HarnessPlaceholder(context.Background())
		if err != nil || again != p {
			t.Fatalf("second call = %s, %v; want the cached %s", again, err, p)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) < 1028 || binary.LittleEndian.Uint32(data[1024:]) != 0xE0F5E1E2 {
			t.Fatalf("%s (%d bytes) has no erofs superblock magic", p, len(data))
		}
		sum, err := ContentHash(p)
		if err != nil {
			t.Fatal(err)
		}
		sums, names = append(sums, sum), append(names, filepath.Base(p))
	}
	if sums[0] != sums[1] || names[0] != names[1] {
		t.Errorf("two builds differ: %v %v", names, sums)
	}
}
