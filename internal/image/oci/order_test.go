package oci

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// orderCase is a pulled image and the Order it must have. Layers come after one
// holding bin/sh; nil layers mean multiLayer.
type orderCase struct {
	name   string
	layers [][]ent
	want   []string
}

func orderCases() []orderCase {
	return []orderCase{
		{
			name: "three layers: rewrites, replacements, whiteouts, an opaque directory",
			// multiLayer's effects: etc/keep and data/big rewritten move to their layer;
			// var/cache (opaque in layer 2) and var/cache/sub (kept, emptied) are
			// re-created by layer 2; opt/old (whited out, then re-created), etc/conf.d
			// (a file become a directory), srv/site (a directory become a file) and
			// usr/lib/libfoo.so (a symlink become a file) belong to layer 3; data/hl,
			// the other name of the first data/big, stays in layer 1.
			layers: nil, // multiLayer
			want: []string{
				"bin", "bin/sh", "data", "data/hl", "etc", "implicit", "implicit/deep",
				"implicit/deep/f", "opt", "srv", "tmp", "usr", "usr/bin", "usr/bin/su",
				"usr/bin/su2", "usr/lib", "usr/lib/libbar.so", "usr/lib/libfoo.so.1", "var",
				"etc/added", "etc/both", "etc/keep", "var/cache", "var/cache/new",
				"var/cache/sub", "var/cache/sub/c",
				"data/big", "etc/conf.d", "etc/conf.d/x", "opt/old", "opt/old/y", "srv/site",
				"usr/lib/libfoo.so",
			},
		},
		{
			name: "a new top layer comes after everything below it",
			layers: [][]ent{
				{dir("etc/", 0o755), file("etc/a", "a", 0o644), dir("z/", 0o755), file("z/z", "z", 0o644)},
				{file("etc/0-first-by-name", "n", 0o644)},
			},
			want: []string{"bin", "bin/sh", "etc", "etc/a", "z", "z/z", "etc/0-first-by-name"},
		},
		{
			name: "a directory re-described by a later layer keeps its place",
			layers: [][]ent{
				{dir("etc/", 0o755), file("etc/a", "a", 0o644)},
				{dir("etc/", 0o700), file("etc/b", "b", 0o644)},
			},
			want: []string{"bin", "bin/sh", "etc", "etc/a", "etc/b"},
		},
		{
			name: "a whited-out directory re-created implicitly carries its new entries",
			layers: [][]ent{
				{dir("d/", 0o755), dir("d/e/", 0o755), file("d/e/old", "o", 0o644), file("a", "a", 0o644)},
				{whiteout(".wh.d"), file("d/e/new", "n", 0o644)},
			},
			want: []string{"bin", "bin/sh", "a", "d", "d/e", "d/e/new"},
		},
		{
			name: "an opaque directory and the directories kept in it are re-created",
			layers: [][]ent{
				{dir("d/", 0o755), dir("d/e/", 0o755), file("d/e/old", "o", 0o644), file("d/f", "f", 0o644)},
				{file("d/e/new", "n", 0o644), whiteout("d/.wh..wh..opq")},
			},
			want: []string{"bin", "bin/sh", "d", "d/e", "d/e/new"},
		},
		{
			name: "a whiteout in the same layer as new entries re-creates the directory",
			layers: [][]ent{
				{dir("d/", 0o755), file("d/old", "o", 0o644)},
				{dir("d/", 0o755), file("d/new", "n", 0o644), whiteout(".wh.d")},
			},
			want: []string{"bin", "bin/sh", "d", "d/new"},
		},
		{
			name: "a hard link added later sits in its layer, its target in the target's",
			layers: [][]ent{
				{file("a", "a", 0o644)},
				{hardlink("b", "a")},
			},
			want: []string{"bin", "bin/sh", "a", "b"},
		},
	}
}

// TestPullOrder checks Image.Order: entries by the layer that created them as they
// are, then by name, directories first.
func TestPullOrder(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	for i, tc := range orderCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layers := multiLayer(t)
			if tc.layers != nil {
				layers = []v1.Layer{layer(t, file("bin/sh", "sh", 0o755))}
				for _, ents := range tc.layers {
					layers = append(layers, layer(t, ents...))
				}
			}
			ref, _ := push(t, host, "order"+string(rune('a'+i))+":v1", image(t, "amd64", v1.Config{}, layers...))
			img, err, target, _ := pullTo(t, newPuller(), ref, Credentials{})
			if err != nil {
				t.Fatalf("pull: %v", err)
			}
			if !slices.Equal(img.Order, tc.want) {
				t.Errorf("order\n got %q\nwant %q", img.Order, tc.want)
			}
			checkOrderCoversTree(t, target, img.Order)
		})
	}
}

// checkOrderCoversTree asserts order lists every entry of the tree at root once, each
// directory before what it holds.
func checkOrderCoversTree(t *testing.T, root string, order []string) {
	t.Helper()
	var tree []string
	err := filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		tree = append(tree, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range order {
		if dir := filepath.Dir(name); dir != "." && !seen[dir] {
			t.Errorf("%q comes before its directory", name)
		}
		seen[name] = true
	}
	sorted := slices.Sorted(slices.Values(order))
	if !slices.Equal(sorted, tree) {
		t.Errorf("order lists %q, the tree holds %q", sorted, tree)
	}
}

// TestOrderKeepsDirectoriesFirst checks the key itself: an entry recorded as created
// before its directory still comes after it.
func TestOrderKeepsDirectoriesFirst(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		created map[string]int
		want    []string
	}{
		{"by layer, then name", map[string]int{"a": 1, "a/x": 1, "b": 0, "b/y": 2},
			[]string{"b", "a", "a/x", "b/y"}},
		{"a child recorded below its directory moves with it", map[string]int{"a": 2, "a/x": 0, "b": 1, "b/y": 1},
			[]string{"b", "b/y", "a", "a/x"}},
		{"names that sort between a directory and its entries", map[string]int{"a": 0, "a/x": 0, "a-b": 0, "a.c": 0, "b": 0, "b/y": 0},
			[]string{"a", "a-b", "a.c", "a/x", "b", "b/y"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, name := range slices.Sorted(maps.Keys(tc.created)) {
				p := filepath.Join(dir, name)
				var err error
				if strings.Contains(name, "/") {
					err = os.WriteFile(p, nil, 0o644)
				} else {
					err = os.Mkdir(p, 0o755)
				}
				if err != nil && !os.IsExist(err) {
					t.Fatal(err)
				}
			}
			tr, err := newTree(dir, Config{}, newMeter(Limits{}))
			if err != nil {
				t.Fatal(err)
			}
			defer tr.close()
			tr.created = tc.created
			got, err := tr.order()
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("order = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	t.Run("an entry no layer created is an error", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "stray"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := newTree(dir, Config{}, newMeter(Limits{}))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.close()
		if _, err := tr.order(); err == nil || !strings.Contains(err.Error(), `"stray"`) {
			t.Errorf("err = %v, want one naming \"stray\"", err)
		}
	})
}
