// Package engrams_test holds the repository's house rules as tests: layering
// (deps_test.go), package docs (docs_test.go) and size limits (shape_test.go).
// They parse the tree with go/parser, so they need no build and run in seconds.
package engrams_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// goFile is one parsed .go file.
type goFile struct {
	path string // slash-separated, relative to the module root
	test bool   // a _test.go file
	ast  *ast.File
}

// goPackage is one directory's Go files. Test files may belong to the
// package or to its external _test package.
type goPackage struct {
	dir   string // relative to the module root, "." for the root
	name  string // the non-test files' package name ("" if there are none)
	files []*goFile
}

func (p *goPackage) nonTest() []*goFile {
	var out []*goFile
	for _, f := range p.files {
		if !f.test {
			out = append(out, f)
		}
	}
	return out
}

// sourceTree is every package of the module, parsed once for all tests.
type sourceTree struct {
	module string
	fset   *token.FileSet
	pkgs   []*goPackage // sorted by dir
}

var (
	treeOnce sync.Once
	tree     *sourceTree
	treeErr  error
)

// loadTree parses every .go file of the module (all build tags: a file for
// another OS obeys the same rules), skipping testdata, vendor, hidden and
// underscore directories and nested modules.
func loadTree(t *testing.T) *sourceTree {
	t.Helper()
	treeOnce.Do(func() { tree, treeErr = parseTree(".") })
	if treeErr != nil {
		t.Fatal(treeErr)
	}
	return tree
}

func parseTree(root string) (*sourceTree, error) {
	module, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); p != root && err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	st := &sourceTree{module: module, fset: token.NewFileSet()}
	files := make([]*goFile, len(paths))
	errs := make([]error, len(paths))
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, p := range paths {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f, err := parser.ParseFile(st.fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
			rel, _ := filepath.Rel(root, p)
			files[i], errs[i] = &goFile{path: filepath.ToSlash(rel), test: strings.HasSuffix(p, "_test.go"), ast: f}, err
		})
	}
	wg.Wait()
	byDir := map[string]*goPackage{}
	for i, f := range files {
		if errs[i] != nil {
			return nil, errs[i]
		}
		dir := path.Dir(f.path)
		p := byDir[dir]
		if p == nil {
			p = &goPackage{dir: dir}
			byDir[dir] = p
			st.pkgs = append(st.pkgs, p)
		}
		p.files = append(p.files, f)
		if !f.test {
			p.name = f.ast.Name.Name
		}
	}
	slices.SortFunc(st.pkgs, func(a, b *goPackage) int { return strings.Compare(a.dir, b.dir) })
	return st, nil
}

func modulePath(gomod string) (string, error) {
	f, err := os.Open(gomod)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// line is the line number of pos.
func (st *sourceTree) line(pos token.Pos) int { return st.fset.Position(pos).Line }
