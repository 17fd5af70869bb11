package oci

import (
	"cmp"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// order lists every entry of the finished tree but its root, sorted by rank, then by
// name (bytewise). An entry's rank is the highest index, among it and its ancestors,
// of the layer that created them as they are now (tree.created). A child's rank is
// never below its parent's and a name sorts after every prefix of it, so every
// directory comes before what it holds, whatever the recorded indices say (a child
// created before its directory was re-created cannot survive the re-creation, but the
// key does not rely on that). The tree is walked to find what is left in it, but its
// readdir order does not matter: the result is sorted.
func (t *tree) order() ([]string, error) {
	type ranked struct {
		name string
		rank int
	}
	var ents []ranked
	dirRank := map[string]int{".": 0}
	err := fs.WalkDir(t.root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		rank, ok := t.created[name]
		if !ok {
			return fmt.Errorf("no layer is recorded as creating %q", name)
		}
		rank = max(rank, dirRank[path.Dir(name)])
		if d.IsDir() {
			dirRank[name] = rank
		}
		ents = append(ents, ranked{name, rank})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("order the tree: %w", err)
	}
	slices.SortFunc(ents, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.rank, b.rank), strings.Compare(a.name, b.name))
	})
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.name
	}
	return out, nil
}
