package harnessreg

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzUnpackTree feeds the harness upload unpacker any tar (or gzip): it
// never panics and never writes or links outside its directory; a tree it
// accepts has its descriptor at the root.
func FuzzUnpackTree(f *testing.F) {
	f.Add(makeTar(f, agentTree("fz", "1.0.0"), false))
	f.Add(makeTar(f, agentTree("fz", "1.0.0"), true))
	f.Add(makeTar(f, append(agentTree("fz", "1.0.0"), tarEntry{name: "esc", typ: tar.TypeSymlink, link: "bin/../..", mode: 0o777}), false))
	f.Add(makeTar(f, append(agentTree("fz", "1.0.0"), tarEntry{name: "../out", body: "x", mode: 0o644}), false))
	f.Add(makeTar(f, []tarEntry{{name: "l", typ: tar.TypeSymlink, link: "m", mode: 0o777}, {name: "m", typ: tar.TypeSymlink, link: "l", mode: 0o777}}, false))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, upload []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "tree")
		err := unpackTree(bytes.NewReader(upload), dir)
		defer removeTree(dir)
		if entries, _ := os.ReadDir(parent); len(entries) > 1 {
			t.Fatalf("the unpacker wrote beside its directory: %v", entries)
		}
		if err != nil {
			return
		}
		if fi, err := os.Lstat(filepath.Join(dir, "harness.json")); err != nil || !fi.Mode().IsRegular() {
			t.Fatalf("an accepted tree without a harness.json file: %v", err)
		}
		root, err := filepath.EvalSymlinks(dir)
		if err != nil {
			t.Fatal(err)
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			if real, err := filepath.EvalSymlinks(p); err == nil && real != root && !strings.HasPrefix(real, root+string(filepath.Separator)) {
				t.Fatalf("symlink %s leads to %s, outside the tree", p, real)
			}
			return nil
		})
	})
}
