package vmimage

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/testutil"
)

// TestWgetWrapper (issue 26): the default root's wget fetches a URL in the
// forms people type, -T and --timeout among them, which Debian's static
// busybox alone answers with a segfault (exit 139); a timeout still ends a
// fetch that stalls. Run on this machine's busybox, the one the root ships.
func TestWgetWrapper(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testutil.SkipOrFail(t, "no /bin/busybox (scripts/install-deps.sh)")
	}
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall" {
			select {
			case <-stall:
			case <-r.Context().Done():
			}
			return
		}
		w.Write([]byte("hello from " + r.URL.Path + "\n"))
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "wget")
	if err := os.WriteFile(wrapper, wgetWrapper, 0o755); err != nil {
		t.Fatal(err)
	}
	u := srv.URL
	for _, tc := range []struct {
		name string
		args []string
		path string
	}{
		{"plain", []string{"-q", "-O-", u + "/a"}, "/a"},
		{"-T SECS", []string{"-T", "20", "-q", "-O-", u + "/b"}, "/b"},
		{"-TSECS", []string{"-T20", "-q", "-O-", u + "/c"}, "/c"},
		{"-qT SECS", []string{"-qT", "20", "-O-", u + "/d"}, "/d"},
		{"-qTSECS", []string{"-qT20", "-O-", u + "/e"}, "/e"},
		{"--timeout=SECS", []string{"--timeout=20", "-q", "-O-", u + "/f"}, "/f"},
		{"--timeout SECS", []string{"--timeout", "20", "-q", "-O-", u + "/g"}, "/g"},
		{"-T after the URL", []string{"-q", "-O-", u + "/h", "-T", "20"}, "/h"},
		{"an argument with spaces", []string{"-q", "-O-", "--header", "X-A: b c", u + "/i"}, "/i"},
	} {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(t.Context(), "/bin/busybox", append([]string{"sh", wrapper}, tc.args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if err != nil || out.String() != "hello from "+tc.path+"\n" {
			t.Errorf("%s: wget %s: %v, %q %q", tc.name, strings.Join(tc.args, " "), err, out.String(), errb.String())
		}
	}
	start := time.Now()
	cmd := exec.CommandContext(t.Context(), "/bin/busybox", "sh", wrapper, "-T", "1", "-q", "-O-", u+"/stall")
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); err == nil || code == 139 || time.Since(start) > 20*time.Second {
		t.Errorf("a stalled fetch with -T 1: exit %d (%v) after %v, want a failure within seconds, not a segfault", code, err, time.Since(start))
	}
}

// TestBusyboxRootWget: the staged default root has the wrapper as its wget
// on PATH, and a login shell's profile points the wget command at it
// (busybox sh would otherwise run its own applet).
func TestBusyboxRootWget(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/bin/busybox"); err != nil {
		testutil.SkipOrFail(t, "no /bin/busybox (scripts/install-deps.sh)")
	}
	root := t.TempDir()
	b := &Builder{cfg: Config{Busybox: "/bin/busybox"}}
	if err := b.stageBusybox(t.Context(), root); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(filepath.Join(root, "usr/bin/wget"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o755 {
		t.Fatalf("usr/bin/wget: %v %v, want the wrapper, a 0755 file", fi, err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "usr/bin/wget")); !bytes.Equal(got, wgetWrapper) {
		t.Error("usr/bin/wget is not the wrapper")
	}
	if p, _ := os.ReadFile(filepath.Join(root, "etc/profile")); !strings.Contains(string(p), `wget() { /usr/bin/wget "$@"; }`) {
		t.Errorf("etc/profile %q does not route wget to the wrapper", p)
	}
}
