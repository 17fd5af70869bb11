package vmimage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/testutil"
)

// TestReproducible builds the root image and a bundle in two caches from
// inputs stored at different paths: the names and bytes must be equal, so
// a snapshot taken over one host's images restores over the other's.
func TestReproducible(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		testutil.SkipOrFail(t, "mkfs.ext4 not installed (scripts/install-deps.sh)")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testutil.SkipOrFail(t, "no /bin/busybox (scripts/install-deps.sh)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct{ root, bundle, rootSum, bundleSum string }
	build := func(host string) result {
		dir := filepath.Join(t.TempDir(), host)
		src := filepath.Join(dir, "inputs", "guest-bin")
		if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(src, []byte("#!/bin/sh\necho guest\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := New(Config{CacheDir: filepath.Join(dir, "cache"), KernelImage: "/unused", RootSizeMiB: 64}, Deps{})
		if err != nil {
			t.Fatal(err)
		}
		var r result
		if r.root, err = b.RootImage(ctx); err != nil {
			t.Fatal(err)
		}
		if r.bundle, err = b.Bundle(ctx, []BundleFile{{Name: "engrams-guest", Source: src, Mode: 0o755}}); err != nil {
			t.Fatal(err)
		}
		if r.rootSum, err = ContentHash(r.root); err != nil {
			t.Fatal(err)
		}
		if r.bundleSum, err = ContentHash(r.bundle); err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := build("host-a")
	time.Sleep(1100 * time.Millisecond) // different wall-clock seconds
	b := build("host-b")
	if filepath.Base(a.root) != filepath.Base(b.root) || filepath.Base(a.bundle) != filepath.Base(b.bundle) {
		t.Errorf("names differ: %s %s vs %s %s", a.root, a.bundle, b.root, b.bundle)
	}
	if a.rootSum != b.rootSum || a.bundleSum != b.bundleSum {
		t.Errorf("content differs: root %s vs %s, bundle %s vs %s", a.rootSum, b.rootSum, a.bundleSum, b.bundleSum)
	}
}

func TestContentHashCache(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(p, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	s1, err := ContentHash(p)
	if err != nil || s1 != "7692c3ad3540bb803c020b3aee66cd8887123234ea0c6e7143c0add73ff431ed" {
		t.Fatalf("hash = %s, %v", s1, err)
	}
	if _, err := os.Stat(p + hashSuffix); err != nil {
		t.Errorf("no cached hash: %v", err)
	}
	if err := os.WriteFile(p, []byte("two!"), 0o644); err != nil { // size changes: cache is stale
		t.Fatal(err)
	}
	if s2, err := ContentHash(p); err != nil || s2 == s1 {
		t.Errorf("hash after a change = %s, %v (stale cache?)", s2, err)
	}
}
