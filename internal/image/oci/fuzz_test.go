package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
)

// fuzzLimits are small, so the fuzzer reaches every bound.
var fuzzLimits = Limits{
	TreeBytes: 64 << 10, Inodes: 64, Entries: 128, StreamBytes: 1 << 20, Expansion: 50, ExpansionSlack: 256 << 10,
	NameBytes: 512, ComponentBytes: 64, LinkBytes: 256, PAXRecords: 8, MetaBytes: 2048,
}

// fuzzSeeds are layer streams worth starting from: entries of every kind, the
// compressions, bounds just passed and broken streams. testdata/fuzz/FuzzApplyLayer
// holds them (and whatever the fuzzer found) too.
func fuzzSeeds(t testing.TB) [][]byte {
	plain := tarBytes(t, dir("./", 0o755), dir("bin/", 0o755), file("bin/sh", "#!sh", 0o755),
		symlink("bin/ash", "sh"), hardlink("bin/hl", "bin/sh"), file("etc/.wh..wh..opq", "", 0o644),
		node("dev/null", tar.TypeChar), node("dev/loop0", tar.TypeBlock), node("run/fifo", tar.TypeFifo),
		hardlink("dev/null2", "dev/null"), file("etc/.wh.gone", "", 0o600))
	zw, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer zw.Close()
	bomb := gzipBytes(t, append(tarBytes(t, file("z", string(make([]byte, 200<<10)), 0o644)), make([]byte, 1<<20)...))
	return [][]byte{
		plain, gzipBytes(t, plain), zw.EncodeAll(plain, nil), plain[:len(plain)/2], bomb,
		tarBytes(t, symlink("evil", "/etc"), file("evil/passwd", "x", 0o644)),
		tarBytes(t, file("../escape", "x", 0o644)),
		tarBytes(t, files("d", 70)...),
	}
}

// FuzzApplyLayer feeds any bytes to the layer decoder: it never panics, fails only
// with a category callers branch on, writes no more than its bounds allow, creates
// nothing but directories, files and symlinks, and nothing outside its tree.
func FuzzApplyLayer(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "tree")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		m := newMeter(fuzzLimits)
		tr, err := newTree(dir, Config{SkipOwnership: !isRoot}, m)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.close()
		br := &blobReader{r: bytes.NewReader(b), h: sha256.New(), prog: &progress{}}
		m.blob = br
		sum := sha256.Sum256(b) // the diff_id of an uncompressed layer
		err = tr.applyLayer(context.Background(), 0, br, v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])})
		if err == nil {
			err = tr.finish()
		}
		if err != nil && !errors.Is(err, ErrCorruptLayer) && !errors.Is(err, ErrUnsafeLayer) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("uncategorized error: %v", err)
		}
		if m.tree > fuzzLimits.TreeBytes || m.stream > fuzzLimits.StreamBytes || m.entries > fuzzLimits.Entries+1 {
			t.Fatalf("past the bounds: %d tree bytes, %d stream bytes, %d entries", m.tree, m.stream, m.entries)
		}
		checkFuzzTree(t, parent, dir)
		if err == nil && len(tr.left) != 0 {
			t.Errorf("placeholders left after finish: %v", tr.left)
		}
	})
}

// checkFuzzTree: parent holds only the tree, which holds no node and no more
// inodes than the bound.
func checkFuzzTree(t *testing.T, parent, dir string) {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil || len(ents) != 1 {
		t.Fatalf("parent holds %v (%v)", ents, err)
	}
	inodes := map[uint64]bool{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Errorf("%s is a %v", p, d.Type())
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && p != dir {
			inodes[st.Ino] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(inodes) > fuzzLimits.Inodes {
		t.Errorf("%d inodes in the tree, past %d", len(inodes), fuzzLimits.Inodes)
	}
}
