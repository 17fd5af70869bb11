package dashboard

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/testutil"
)

// webDir is the dashboard's source (web/, at the module root).
const webDir = "../../web"

// requireWeb skips (fails in CI) without node and web/node_modules
// (scripts/install-deps.sh installs them).
func requireWeb(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("npx"); err != nil {
		testutil.SkipOrFail(t, "npx not installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(webDir, "node_modules", ".bin", "vite")); err != nil {
		testutil.SkipOrFail(t, "web/node_modules missing (scripts/install-deps.sh runs npm ci): %v", err)
	}
}

func npx(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "npx", args...)
	cmd.Dir = webDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npx %v: %v\n%s", args, err, out)
	}
}

// TestAPITypesAreCurrent: web/src/api/schema.gen.ts is what
// openapi-typescript makes of api/openapi.yaml now (regenerate with `npm
// run gen` in web/).
func TestAPITypesAreCurrent(t *testing.T) {
	t.Parallel()
	requireWeb(t)
	out := filepath.Join(t.TempDir(), "schema.gen.ts")
	npx(t, "openapi-typescript", "../api/openapi.yaml", "-o", out)
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(webDir, "src", "api", "schema.gen.ts"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("web/src/api/schema.gen.ts is not what api/openapi.yaml generates (%v): run `npm run gen` in web/", err)
	}
}

// TestBuiltAppIsCurrent: static.gen is the build of web/ as it is now
// (type-checked; rebuild with `npm run build` in web/), file for file.
func TestBuiltAppIsCurrent(t *testing.T) {
	t.Parallel()
	requireWeb(t)
	npx(t, "tsc", "--noEmit", "-p", ".")
	out := t.TempDir()
	npx(t, "vite", "build", "--outDir", out, "--emptyOutDir", "--logLevel", "warn")
	want := readTree(t, os.DirFS(out))
	got := readTree(t, os.DirFS("static.gen"))
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("static.gen/%s differs from a fresh build", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("static.gen/%s is not in a fresh build", name)
		}
	}
	if t.Failed() {
		t.Log("rebuild the dashboard: `npm run build` in web/, and commit internal/dashboard/static.gen")
	}
}

func readTree(t *testing.T, fsys fs.FS) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		out[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
