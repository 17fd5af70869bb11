package localdir_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/blob"
	"github.com/engrams/engrams/internal/blob/blobtest"
	"github.com/engrams/engrams/internal/blob/localdir"
)

func open(t testing.TB, dir string) *localdir.Store {
	t.Helper()
	s, err := localdir.New(localdir.Config{Dir: dir}, localdir.Deps{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store { return open(t, t.TempDir()) })
}

func BenchmarkStore(b *testing.B) {
	blobtest.Bench(b, open(b, b.TempDir()))
}

// TestNoTempFilesLeft: after failed and successful Puts the temp directory
// is empty and the tree holds only the object.
func TestNoTempFilesLeft(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if err := s.Put(ctx, "a/b", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, "a/c", strings.NewReader("x"), 5); err == nil {
		t.Fatal("short Put succeeded")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "~tmp")); len(ents) != 0 {
		t.Errorf("temp dir holds %d files", len(ents))
	}
	var files []string
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, rel)
		}
		return nil
	})
	if !slices.Equal(files, []string{"a/b"}) {
		t.Errorf("files = %q, want [a/b]", files)
	}
}

// TestDeletePrunesEmptyDirs: deleting the last key under a directory
// removes the directory, so "a" can then become an object.
func TestDeletePrunesEmptyDirs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if err := s.Put(ctx, "a/b/c", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/b/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); !os.IsNotExist(err) {
		t.Errorf("a/ still exists after deleting its only key: %v", err)
	}
	if err := s.Put(ctx, "a", strings.NewReader("x"), 1); err != nil {
		t.Errorf("Put(a) after pruning: %v", err)
	}
}

// TestCrashLeftovers: temp files of crashed Puts (unlocked, old) are never
// listed or read, and the next New removes them; a temp file still locked
// by a live writer, or too young, survives the sweep.
func TestCrashLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := open(t, dir)
	ctx := context.Background()
	if err := s.Put(ctx, "k", strings.NewReader("v"), 1); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "~tmp")
	old := time.Now().Add(-time.Hour)
	mk := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	crashed, live, young := mk("put-crashed"), mk("put-live"), mk("put-young")
	for _, p := range []string{crashed, live} {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	lf, err := os.Open(live)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	// A stray file in the tree whose name is not a key segment is ignored.
	if err := os.WriteFile(filepath.Join(dir, "k~"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	var keys []string
	_ = s.List(ctx, "", func(i blob.Info) error { keys = append(keys, i.Key); return nil })
	if !slices.Equal(keys, []string{"k"}) {
		t.Errorf("List = %q, want [k]", keys)
	}
	open(t, dir) // sweeps on open
	for p, want := range map[string]bool{crashed: false, live: true, young: true} {
		_, err := os.Stat(p)
		if exists := err == nil; exists != want {
			t.Errorf("%s exists = %v after sweep, want %v", filepath.Base(p), exists, want)
		}
	}
	n, err := s.Sweep(ctx, 0)
	if err != nil || n != 1 {
		t.Errorf("Sweep(0) = %d, %v; want 1 (the young unlocked file)", n, err)
	}
}

// TestKeysStayInDir: no key, valid or not, touches anything outside Dir.
func TestKeysStayInDir(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := open(t, dir)
	ctx := context.Background()
	for _, k := range []string{"../escape", "a/../../escape", "/tmp/escape", "..", "a/..", "~tmp/x"} {
		_ = s.Put(ctx, k, strings.NewReader("x"), 1)
		_ = s.Delete(ctx, k)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 || ents[0].Name() != "store" {
		t.Errorf("parent dir holds %d entries, want only store/", len(ents))
	}
}
