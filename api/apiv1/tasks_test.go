package apiv1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/testutil"
)

func TestRepoDiffPatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, path, diff, want string
	}{
		{name: "unchanged", path: "app", diff: "", want: ""},
		{name: "one modified file", path: "app",
			diff: "diff --git a/main.go b/main.go\nindex 1111111..2222222 100644\n--- a/main.go\n+++ b/main.go\n@@ -1 +1 @@\n-package x\n+package main\n",
			want: "diff --git a/app/main.go b/app/main.go\nindex 1111111..2222222 100644\n--- a/app/main.go\n+++ b/app/main.go\n@@ -1 +1 @@\n-package x\n+package main\n"},
		{name: "added, deleted and nested files", path: "svc",
			diff: "diff --git a/cmd/new.go b/cmd/new.go\nnew file mode 100644\nindex 0000000..3e75765\n--- /dev/null\n+++ b/cmd/new.go\n@@ -0,0 +1 @@\n+new\n" +
				"diff --git a/old.txt b/old.txt\ndeleted file mode 100644\nindex 3e75765..0000000\n--- a/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n",
			want: "diff --git a/svc/cmd/new.go b/svc/cmd/new.go\nnew file mode 100644\nindex 0000000..3e75765\n--- /dev/null\n+++ b/svc/cmd/new.go\n@@ -0,0 +1 @@\n+new\n" +
				"diff --git a/svc/old.txt b/svc/old.txt\ndeleted file mode 100644\nindex 3e75765..0000000\n--- a/svc/old.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-old\n"},
		{name: "renamed file", path: "app",
			diff: "diff --git a/old.txt b/new.txt\nsimilarity index 100%\nrename from old.txt\nrename to new.txt\n",
			want: "diff --git a/app/old.txt b/app/new.txt\nsimilarity index 100%\nrename from app/old.txt\nrename to app/new.txt\n"},
		{name: "renamed and changed", path: "lib",
			diff: "diff --git a/a.go b/b.go\nsimilarity index 90%\nrename from a.go\nrename to b.go\nindex 1..2 100644\n--- a/a.go\n+++ b/b.go\n@@ -1 +1 @@\n-x\n+y\n",
			want: "diff --git a/lib/a.go b/lib/b.go\nsimilarity index 90%\nrename from lib/a.go\nrename to lib/b.go\nindex 1..2 100644\n--- a/lib/a.go\n+++ b/lib/b.go\n@@ -1 +1 @@\n-x\n+y\n"},
		{name: "content lines that look like headers are left alone", path: "db",
			// The lines "-- a/b: old" and "++ b/c: new" removed and added.
			diff: "diff --git a/q.sql b/q.sql\nindex 1..2 100644\n--- a/q.sql\n+++ b/q.sql\n@@ -1,2 +1,2 @@\n--- a/b: old\n+++ b/c: new\n select 1;\n" +
				"diff --git a/r.sql b/r.sql\n--- a/r.sql\n+++ b/r.sql\n@@ -1 +1 @@\n--- a/x\n+++ b/x\n",
			want: "diff --git a/db/q.sql b/db/q.sql\nindex 1..2 100644\n--- a/db/q.sql\n+++ b/db/q.sql\n@@ -1,2 +1,2 @@\n--- a/b: old\n+++ b/c: new\n select 1;\n" +
				"diff --git a/db/r.sql b/db/r.sql\n--- a/db/r.sql\n+++ b/db/r.sql\n@@ -1 +1 @@\n--- a/x\n+++ b/x\n"},
		{name: "binary file", path: "app",
			diff: "diff --git a/logo.png b/logo.png\nnew file mode 100644\nindex 0000000..1234567\nGIT binary patch\nliteral 3\nKcmZ?wbN~Pa\n\nliteral 0\nHcmV?d00001\n\n",
			want: "diff --git a/app/logo.png b/app/logo.png\nnew file mode 100644\nindex 0000000..1234567\nGIT binary patch\nliteral 3\nKcmZ?wbN~Pa\n\nliteral 0\nHcmV?d00001\n\n"},
		{name: "mode change only", path: "app",
			diff: "diff --git a/run.sh b/run.sh\nold mode 100644\nnew mode 100755\n",
			want: "diff --git a/app/run.sh b/app/run.sh\nold mode 100644\nnew mode 100755\n"},
		{name: "a diff without a final newline", path: "app",
			diff: "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b",
			want: "diff --git a/app/x b/app/x\n--- a/app/x\n+++ b/app/x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b"},
		{name: "nested repository path", path: "src/app",
			diff: "diff --git a/x b/x\n--- a/x\n+++ b/x\n",
			want: "diff --git a/src/app/x b/src/app/x\n--- a/src/app/x\n+++ b/src/app/x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := apiv1.RepoDiff{Path: tt.path, URL: "https://h/" + tt.path, Base: "b", Diff: tt.diff}
			if got := d.Patch(); got != tt.want {
				t.Errorf("Patch():\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// TestRepoDiffPatchApplies: a repository's diff, taken the way task diff
// takes it (a temporary index, untracked files added, against the base
// commit), made into a patch by Patch, applies with `git apply -p1` from a
// directory holding the repository at its base: modified, added, deleted
// and renamed files, and lines that look like diff headers.
func TestRepoDiffPatchApplies(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		testutil.SkipOrFail(t, "git not found: %v", err)
	}
	root := t.TempDir()
	git := func(dir string, env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "HOME=" + root, "GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x",
			"GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x"}, env...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	write := func(dir string, files map[string]string) {
		t.Helper()
		for name, body := range files {
			p := filepath.Join(dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	work := filepath.Join(root, "work", "app")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	git(work, nil, "init", "-q")
	write(work, map[string]string{"main.go": "package x\n", "old.txt": "one\ntwo\nthree\nfour\n", "gone.txt": "bye\n",
		"q.sql": "-- a/b: old\nselect 1;\n", "dir/keep.txt": "k\n"})
	git(work, nil, "add", "-A")
	git(work, nil, "commit", "-qm", "base")
	base := strings.TrimSpace(git(work, nil, "rev-parse", "HEAD"))
	dst := filepath.Join(root, "dst")
	git(root, nil, "clone", "-q", work, filepath.Join(dst, "app"))

	// The agent's changes.
	write(work, map[string]string{"main.go": "package main\n", "q.sql": "++ b/c: new\nselect 1;\n", "dir/added.txt": "new\n"})
	if err := os.Remove(filepath.Join(work, "gone.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(work, "old.txt"), filepath.Join(work, "dir", "renamed.txt")); err != nil {
		t.Fatal(err)
	}
	index := []string{"GIT_INDEX_FILE=" + filepath.Join(root, "index")}
	git(work, index, "read-tree", base)
	git(work, index, "add", "-A", ".")
	diff := git(work, index, "-c", "core.quotepath=off", "diff", "--cached", "--no-color", "--binary", base)
	if !strings.Contains(diff, "rename from old.txt") || !strings.Contains(diff, "\n--- a/b: old\n") {
		t.Fatalf("the diff lacks the cases this test is about:\n%s", diff)
	}

	patch := filepath.Join(root, "agent.patch")
	if err := os.WriteFile(patch, []byte(apiv1.RepoDiff{Path: "app", Diff: diff}.Patch()), 0o644); err != nil {
		t.Fatal(err)
	}
	git(dst, nil, "apply", "-p1", patch)
	for _, name := range []string{"main.go", "q.sql", "dir/added.txt", "dir/renamed.txt", "dir/keep.txt", "gone.txt", "old.txt"} {
		want, werr := os.ReadFile(filepath.Join(work, name))
		got, gerr := os.ReadFile(filepath.Join(dst, "app", name))
		if string(got) != string(want) || os.IsNotExist(werr) != os.IsNotExist(gerr) {
			t.Errorf("%s after apply: %q (%v), want %q (%v)", name, got, gerr, want, werr)
		}
	}
}
