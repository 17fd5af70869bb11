package engrams_test

import (
	"fmt"
	"go/ast"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// What the shape test measures.
const (
	pkgFiles  = "files"   // non-test .go files of a package
	funcLines = "func"    // lines of a function or method, test files included
	fileLines = "lines"   // lines of a non-test file
	methods   = "methods" // methods declared on one type
)

// sizeLimit caps a measure for the packages matching scope; the first
// limit of a kind whose scope matches applies.
type sizeLimit struct {
	kind   string
	scope  string // package pattern, as in deps_test.go
	max    int
	reason string
}

var sizeLimits = []sizeLimit{
	{pkgFiles, "internal/coordinator", 15, "the coordinator only wires the services split out of it"},
	{pkgFiles, "...", 25, "a package with more files does more than one job"},
	{funcLines, "...", 80, "a function longer than a screen hides its steps; name them"},
	{fileLines, "...", 800, "a longer file mixes concerns; split it by them"},
	{methods, "...", 40, "a type with more methods is several types"},
}

// methodsExempt are the types whose method count is not limited.
var methodsExempt = map[string]string{
	"internal/store/sqlstore.Store": "implements the whole store.Store contract once for both dialects",
	"internal/store/postgres.Store": "a store.Store backend",
	"internal/store/sqlite.Store":   "a store.Store backend",
}

// measure is one measured thing: key names it in messages.
type measure struct {
	kind, key, pkg string
	value          int
}

func measureTree(st *sourceTree) []measure {
	var out []measure
	for _, p := range st.pkgs {
		nonTest := p.nonTest()
		if len(nonTest) > 0 {
			out = append(out, measure{pkgFiles, pkgFiles + " " + p.dir, p.dir, len(nonTest)})
		}
		count := map[string]int{}
		for _, f := range p.files {
			if !f.test {
				n := st.fset.File(f.ast.Pos()).LineCount()
				out = append(out, measure{fileLines, fileLines + " " + f.path, p.dir, n})
			}
			for _, d := range f.ast.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				recv := receiver(fn)
				if recv != "" && !f.test {
					count[recv]++
				}
				name := fn.Name.Name
				if recv != "" {
					name = recv + "." + name
				}
				scope := p.dir
				if strings.HasSuffix(f.ast.Name.Name, "_test") {
					scope += "_test"
				}
				n := st.line(fn.End()) - st.line(fn.Pos()) + 1
				out = append(out, measure{funcLines, fmt.Sprintf("%s %s.%s", funcLines, scope, name), p.dir, n})
			}
		}
		for typ, n := range count {
			out = append(out, measure{methods, fmt.Sprintf("%s %s.%s", methods, p.dir, typ), p.dir, n})
		}
	}
	return out
}

// receiver is the base type name of fn's receiver, "" for a function.
func receiver(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return ""
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.ParenExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", t)
		}
	}
}

func limitFor(kind, pkg string) *sizeLimit {
	for i := range sizeLimits {
		if l := &sizeLimits[i]; l.kind == kind && matchPattern(l.scope, pkg) {
			return l
		}
	}
	return nil
}

// shapeViolations says what in st is over its size limit.
func shapeViolations(st *sourceTree) (bad []string, measured int) {
	for _, m := range measureTree(st) {
		measured++
		l := limitFor(m.kind, m.pkg)
		if l == nil || m.value <= l.max {
			continue
		}
		if m.kind == methods {
			if _, ok := methodsExempt[strings.TrimPrefix(m.key, methods+" ")]; ok {
				continue
			}
		}
		bad = append(bad, fmt.Sprintf("%s is %d, over the limit of %d: %s", m.key, m.value, l.max, l.reason))
	}
	slices.Sort(bad)
	return bad, measured
}

// TestShape checks the size limits.
func TestShape(t *testing.T) {
	t.Parallel()
	bad, measured := shapeViolations(loadTree(t))
	for _, b := range bad {
		t.Error(b)
	}
	if measured < 100 {
		t.Fatalf("measured only %d things: is the test running at the repository root?", measured)
	}
}

// TestShapeLimitsBite checks the measurer on a made-up module, so a broken
// one cannot pass TestShape vacuously.
func TestShapeLimitsBite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("internal/big/long.go", "package big\n\nfunc long() {\n"+strings.Repeat("\t_ = 1\n", 80)+"}\n")
	var methods strings.Builder
	methods.WriteString("package big\n\ntype T struct{}\n\n")
	for i := range 41 {
		fmt.Fprintf(&methods, "func (T) M%d() {}\n", i)
	}
	write("internal/big/methods.go", methods.String())
	write("internal/big/huge.go", "package big\n"+strings.Repeat("\n", 801))
	st, err := parseTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := shapeViolations(st)
	want := []string{"func internal/big.long is 82", "lines internal/big/huge.go is 802", "methods internal/big.T is 41"}
	if len(bad) != len(want) {
		t.Fatalf("violations %q, want %d of them", bad, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(bad[i], w) {
			t.Errorf("violation %d is %q, want it to start with %q", i, bad[i], w)
		}
	}
}
