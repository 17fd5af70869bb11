package process

import (
	"archive/tar"
	"bytes"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestTarRoundTrip(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "root")
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mustDo(os.MkdirAll(filepath.Join(src, "a/b"), 0o750))
	mustDo(os.WriteFile(filepath.Join(src, "a/b/f.sh"), []byte("#!/bin/sh\n"), 0o755))
	mustDo(os.WriteFile(filepath.Join(src, "empty"), nil, 0o600))
	mustDo(os.Symlink("a/b/f.sh", filepath.Join(src, "link")))
	ln, err := net.Listen("unix", filepath.Join(src, "s.sock")) // skipped by the archive
	mustDo(err)
	defer ln.Close()
	archive := filepath.Join(t.TempDir(), "disk.tar")
	mustDo(writeTar(src, archive))
	raw, err := os.ReadFile(archive)
	mustDo(err)
	if bytes.Contains(raw, []byte(src)) {
		t.Error("the archive names its source directory")
	}
	dst := filepath.Join(t.TempDir(), "restored")
	mustDo(extractTar(archive, dst))
	tests := []struct {
		path string
		mode os.FileMode
		data string
	}{
		{"a", os.ModeDir | 0o750, ""},
		{"a/b/f.sh", 0o755, "#!/bin/sh\n"},
		{"empty", 0o600, ""},
	}
	for _, tt := range tests {
		st, err := os.Lstat(filepath.Join(dst, tt.path))
		if err != nil || st.Mode() != tt.mode {
			t.Errorf("%s: %v %v, want mode %v", tt.path, st.Mode(), err, tt.mode)
			continue
		}
		if !st.IsDir() {
			if b, _ := os.ReadFile(filepath.Join(dst, tt.path)); string(b) != tt.data {
				t.Errorf("%s = %q", tt.path, b)
			}
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "a/b/f.sh" {
		t.Errorf("link = %q, %v", l, err)
	}
	if _, err := os.Lstat(filepath.Join(dst, "s.sock")); !os.IsNotExist(err) {
		t.Errorf("socket archived: %v", err)
	}
}

func TestExtractRejectsEscapes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "evil.tar")
	if err := writeEvilTar(archive); err != nil {
		t.Fatal(err)
	}
	if err := extractTar(archive, filepath.Join(dir, "out")); err == nil {
		t.Error("extracting ../escape succeeded")
	}
	if _, err := os.Stat(filepath.Join(dir, "escape")); !os.IsNotExist(err) {
		t.Errorf("file written outside the root: %v", err)
	}
}

func writeEvilTar(p string) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write([]byte("x")); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
