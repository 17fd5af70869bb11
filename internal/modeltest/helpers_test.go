package modeltest_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/modeltest"
)

const testKey = "test-key"

// gitRepo makes a git repository with one empty commit and returns its real
// path.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main"},
		{"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "base"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	return dir
}

// logRun logs what a CLI run printed (go test -v shows it).
func logRun(t *testing.T, what string, run *modeltest.Run) {
	t.Helper()
	t.Logf("%s: exit %d in %v, types %v", what, run.ExitCode, run.Duration, run.Types())
	for _, l := range run.Lines {
		t.Logf("  %6.0fms %.300s", float64(l.At.Microseconds())/1000, l.Raw)
	}
	if run.Stderr != "" {
		t.Logf("stderr: %.2000s", run.Stderr)
	}
}

// recordTestdata writes a run's JSON lines to testdata/name when
// ENGRAMS_RECORD_TESTDATA=1: the examples the event normalizer is built
// from (see testdata/README.md).
func recordTestdata(t *testing.T, name string, run *modeltest.Run) {
	t.Helper()
	if os.Getenv("ENGRAMS_RECORD_TESTDATA") != "1" {
		return
	}
	var b bytes.Buffer
	for _, l := range run.Lines {
		b.Write(l.Raw)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join("testdata", name), b.Bytes(), 0o644); err != nil {
		t.Fatalf("record testdata: %v", err)
	}
}
