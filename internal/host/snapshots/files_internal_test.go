package snapshots

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tarOf writes a tar of the given entries (name -> content; a name ending
// in "/" is a directory, "->" in the content makes a symlink).
func tarOf(t testing.TB, entries [][2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e[0], Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(e[1])), Format: tar.FormatPAX}
		switch {
		case strings.HasSuffix(e[0], "/"):
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeDir, 0o755, 0
		case strings.HasPrefix(e[1], "->"):
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeSymlink, strings.TrimPrefix(e[1], "->"), 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg {
			_, _ = tw.Write([]byte(e[1]))
		}
	}
	_ = tw.Close()
	return buf.Bytes()
}

// sparseTar is a PAX sparse entry (format 1.0) whose logical size, 1 GiB,
// is far over the 3.5 KiB the archive holds: a reader expands its holes.
// tar.Writer drops the GNU.sparse records, so the blocks are made here.
func sparseTar(t testing.TB) []byte {
	t.Helper()
	rec := func(k, v string) string {
		for l := len(k) + len(v) + 3; ; {
			s := fmt.Sprintf("%d %s=%s\n", l, k, v)
			if len(s) == l {
				return s
			}
			l = len(s)
		}
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", "holes") + rec("GNU.sparse.realsize", "1073741824")
	data := append(padBlock([]byte("1\n0\n4\n")), "abcd"...) // the map (one fragment: 4 bytes at 0), then its data
	out := append(ustarBlock('x', "PaxHeaders/holes", len(pax)), padBlock([]byte(pax))...)
	out = append(out, ustarBlock('0', "holes", len(data))...)
	return append(append(out, padBlock(data)...), make([]byte, 1024)...)
}

func ustarBlock(typ byte, name string, size int) []byte {
	b := make([]byte, 512)
	copy(b, name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x000000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x0000000000000\x00", size))
	b[156] = typ
	copy(b[257:], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func padBlock(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}

// TestUntarBounds: untar writes at most its archive's size of file data
// (a sparse entry claiming more is refused) and nothing outside dst.
func TestUntarBounds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		archive []byte
		limit   int64 // 0: the archive's size
		wantErr bool
	}{
		{name: "a tree", archive: tarOf(t, [][2]string{{"d/", ""}, {"d/a", "hello"}, {"l", "->d/a"}})},
		{name: "files over the limit", archive: tarOf(t, [][2]string{{"a", "hello"}, {"b", "world"}}), limit: 9, wantErr: true},
		{name: "a sparse entry bigger than its archive", archive: sparseTar(t), wantErr: true},
		{name: "a path out of the tree", archive: tarOf(t, [][2]string{{"../x", "out"}}), wantErr: true},
		{name: "through a symlink out of the tree", archive: tarOf(t, [][2]string{{"l", "->.."}, {"l/x", "out"}}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			dst := filepath.Join(parent, "dst")
			limit := tt.limit
			if limit == 0 {
				limit = int64(len(tt.archive))
			}
			err := untar(context.Background(), bytes.NewReader(tt.archive), dst, limit)
			if (err != nil) != tt.wantErr {
				t.Fatalf("untar: %v, want an error: %v", err, tt.wantErr)
			}
			if n := treeBytes(t, parent); n > limit {
				t.Fatalf("wrote %d bytes, over the limit %d", n, limit)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 1 {
				t.Fatalf("untar wrote beside dst: %v", entries)
			}
		})
	}
}

func treeBytes(t testing.TB, root string) int64 {
	var n int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// FuzzUntar feeds the snapshot tar reader any archive: it never panics,
// never writes outside dst and never writes more file bytes than the
// archive holds.
func FuzzUntar(f *testing.F) {
	f.Add(tarOf(f, [][2]string{{"d/", ""}, {"d/a", "hello"}, {"l", "->d/a"}}))
	f.Add(tarOf(f, [][2]string{{"../x", "out"}, {"/abs", "x"}}))
	f.Add(tarOf(f, [][2]string{{"l", "->/etc"}, {"l/passwd", "x"}}))
	f.Add(sparseTar(f))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, archive []byte) {
		parent := t.TempDir()
		_ = untar(context.Background(), bytes.NewReader(archive), filepath.Join(parent, "dst"), int64(len(archive)))
		if n := treeBytes(t, parent); n > int64(len(archive)) {
			t.Fatalf("wrote %d bytes from a %d byte archive", n, len(archive))
		}
		if entries, _ := os.ReadDir(parent); len(entries) != 1 {
			t.Fatalf("untar wrote beside dst: %v", entries)
		}
	})
}
