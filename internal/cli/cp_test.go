package cli_test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSessionCp copies a directory into a session and back, and a file
// out on its own; bad argument pairs are usage errors.
func TestSessionCp(t *testing.T) {
	t.Parallel()
	srv := newServer(t)
	src := t.TempDir()
	for name, body := range map[string]string{"a.txt": "alpha\n", "sub/b.sh": "#!/bin/sh\necho b\n"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r := run(t, srv, nil, "", "session", "cp", src, "s1:/work/in"); r.code != 0 {
		t.Fatalf("cp in: %d %s", r.code, r.stderr)
	}
	back := filepath.Join(t.TempDir(), "out")
	if r := run(t, srv, nil, "", "session", "cp", "s1:/work/in", back); r.code != 0 {
		t.Fatalf("cp out: %d %s", r.code, r.stderr)
	}
	for name, want := range map[string]string{"a.txt": "alpha\n", "sub/b.sh": "#!/bin/sh\necho b\n"} {
		if b, err := os.ReadFile(filepath.Join(back, name)); err != nil || string(b) != want {
			t.Errorf("%s after the round trip: %q %v, want %q", name, b, err, want)
		}
	}
	dir := t.TempDir()
	if r := run(t, srv, nil, "", "session", "cp", "s1:/work/in/a.txt", dir); r.code != 0 {
		t.Fatalf("cp a file into a directory: %d %s", r.code, r.stderr)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a.txt")); err != nil || string(b) != "alpha\n" {
		t.Errorf("a.txt copied into a directory: %q %v", b, err)
	}
	for _, args := range [][]string{{"./x", "./y"}, {"s1:/a", "s1:/b"}, {"./x", "s1:relative"}} {
		if r := run(t, srv, nil, "", append([]string{"session", "cp"}, args...)...); r.code != 2 {
			t.Errorf("cp %v: exit %d, want a usage error (%s)", args, r.code, r.stderr)
		}
	}
}
