package engrams_test

import (
	"fmt"
	"path"
	"strings"
	"testing"
)

// maxDocLines is the length of a package doc comment: the project asks for
// "a doc.go of three lines" that says the package's job and who may import it.
const maxDocLines = 3

// docProblems lists what is wrong with a package's doc comment: it lives in
// doc.go and only there, starts "Package <name> " ("Command <dir> " for a
// main package) and has at most maxDocLines lines.
func docProblems(st *sourceTree, p *goPackage) []string {
	want := "Package " + p.name + " "
	if p.name == "main" {
		want = "Command " + path.Base(p.dir) + " "
	}
	var problems []string
	var doc *goFile
	for _, f := range p.nonTest() {
		switch {
		case path.Base(f.path) == "doc.go":
			doc = f
		case f.ast.Doc != nil:
			problems = append(problems, fmt.Sprintf("%s has a package comment: it belongs in doc.go only", f.path))
		}
	}
	switch {
	case doc == nil:
		problems = append(problems, fmt.Sprintf("no doc.go: add one whose comment starts %q", want))
	case doc.ast.Doc == nil:
		problems = append(problems, fmt.Sprintf("%s has no package comment: it should start %q", doc.path, want))
	default:
		if text := doc.ast.Doc.Text(); !strings.HasPrefix(text, want) {
			first, _, _ := strings.Cut(text, "\n")
			problems = append(problems, fmt.Sprintf("%s: the comment starts %q, want %q", doc.path, first, want))
		}
		if n := st.line(doc.ast.Doc.End()) - st.line(doc.ast.Doc.Pos()) + 1; n > maxDocLines {
			problems = append(problems, fmt.Sprintf("%s: the comment has %d lines, at most %d (say the job and who may import it)", doc.path, n, maxDocLines))
		}
	}
	return problems
}

// TestPackageDocs checks the doc comment of every package with non-test files.
func TestPackageDocs(t *testing.T) {
	t.Parallel()
	st := loadTree(t)
	checked := 0
	for _, p := range st.pkgs {
		if p.name == "" {
			continue // only tests, like this one
		}
		checked++
		for _, problem := range docProblems(st, p) {
			t.Errorf("package %s: %s", p.dir, problem)
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d packages: is the test running at the repository root?", checked)
	}
}
