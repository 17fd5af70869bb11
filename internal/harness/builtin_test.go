package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/testutil"
)

// The npm versions the tests pin: claude-code and codex as
// internal/modeltest pins them, and the last claude-code shipping cli.js.
const (
	testClaudeVersion     = "2.1.197"
	testClaudeNodeVersion = "2.1.112"
	testCodexVersion      = "0.171.0"
)

func TestShellHarness(t *testing.T) {
	t.Parallel()
	b := newTestBuilder(t, Config{})
	stage := filepath.Join(t.TempDir(), "stage")
	d, err := b.StageBuiltin(context.Background(), BuiltinSpec{Name: BuiltinShell}, stage)
	if err != nil {
		t.Fatalf("StageBuiltin: %v", err)
	}
	if d.Protocol != guestapi.HarnessProtocolShell || d.Requires.Libc != guestapi.LibcNone || !reflect.DeepEqual(d.Entrypoint, []string{ShellEntrypoint}) {
		t.Fatalf("descriptor %+v", d)
	}
	work := t.TempDir()
	cmd := exec.Command("sh", d.Argv(stage)...) // as the adapter would, but with the host's sh
	cmd.Dir = work
	cmd.Stdin = strings.NewReader("printf 'hi\\n' > hello.txt\ncat hello.txt\n\nprintf 'a\"b\\\\c\\td\\n'; echo err >&2; exit 3\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shell harness: %v", err)
	}
	var got []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		e, err := guestapi.ParseShellEvent(sc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		s := e.Type + ":" + e.Text
		if e.ExitCode != nil {
			s += string(rune('0' + *e.ExitCode))
		}
		got = append(got, s)
	}
	want := []string{
		"ready:", "prompt:printf 'hi\\n' > hello.txt", "result:0", "idle:",
		"prompt:cat hello.txt", "output:hi", "result:0", "idle:",
		"prompt:printf 'a\"b\\\\c\\td\\n'; echo err >&2; exit 3", "output:a\"b\\c\td", "output:err", "result:3", "idle:",
		"exit:",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if body, err := os.ReadFile(filepath.Join(work, "hello.txt")); err != nil || string(body) != "hi\n" {
		t.Fatalf("hello.txt = %q, %v", body, err)
	}

	var digests []string
	for range 2 {
		bundle, err := b.BuildBuiltin(context.Background(), BuiltinSpec{Name: BuiltinShell, Version: ShellVersion})
		if err != nil {
			t.Fatalf("BuildBuiltin: %v", err)
		}
		digests = append(digests, bundle.Digest)
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the shell harness: %v", digests)
	}
	if _, err := b.BuildBuiltin(context.Background(), BuiltinSpec{Name: BuiltinShell, Version: "2"}); !errors.Is(err, ErrUnknownBuiltin) {
		t.Fatalf("shell version 2: %v, want ErrUnknownBuiltin", err)
	}
	if _, err := b.StageBuiltin(context.Background(), BuiltinSpec{Name: BuiltinShell}, stage); err == nil {
		t.Fatal("staging into a non-empty directory succeeded")
	}
}

// TestBundleMounts mounts the shell bundle as the guest will (read-only
// erofs) and runs the harness from it.
func TestBundleMounts(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "mounting a bundle needs root")
	}
	b := newTestBuilder(t, Config{})
	bundle, err := b.BuildBuiltin(context.Background(), BuiltinSpec{Name: BuiltinShell})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", guestapi.HarnessFSType, "-o", "loop,ro", bundle.Path, mnt).CombinedOutput(); err != nil {
		testutil.SkipOrFail(t, "mount -t %s: %v: %s", guestapi.HarnessFSType, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	d, err := guestapi.LoadHarnessDescriptor(mnt)
	if err != nil || !reflect.DeepEqual(d, bundle.Descriptor) {
		t.Fatalf("descriptor in the bundle: %+v, %v; want %+v", d, err, bundle.Descriptor)
	}
	cmd := exec.Command(d.Argv(mnt)[0])
	cmd.Dir, cmd.Stdin = t.TempDir(), strings.NewReader("echo mounted\n")
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), `{"type":"output","text":"mounted"}`) {
		t.Fatalf("harness from the mounted bundle: %v: %s", err, out)
	}
}

// testCacheDir is where downloads are kept across test runs:
// $ENGRAMS_TEST_CACHE, else $XDG_CACHE_HOME/engrams-test, else
// ~/.cache/engrams-test; "harness" under it.
func testCacheDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("ENGRAMS_TEST_CACHE"); d != "" {
		return filepath.Join(d, "harness")
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "engrams-test", "harness")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		t.Fatalf("find the test cache: %v", err)
	}
	return filepath.Join(home, ".cache", "engrams-test", "harness")
}

// TestBuiltinsFromNPM assembles the real harnesses from the npm registry
// (cached across runs), runs each entrypoint's --version from the staged
// tree with an empty HOME and no network, and builds the bundle.
func TestBuiltinsFromNPM(t *testing.T) {
	t.Parallel()
	cache := testCacheDir(t)
	tests := []struct {
		spec  BuiltinSpec
		entry []string
		want  string // --version output
		req   guestapi.HarnessRequires
	}{
		{BuiltinSpec{Name: BuiltinClaudeCode, Version: testClaudeVersion}, []string{"bin/claude"},
			testClaudeVersion + " (Claude Code)", guestapi.HarnessRequires{Libc: guestapi.LibcGlibc, GlibcMin: "2.17"}},
		{BuiltinSpec{Name: BuiltinClaudeCode, Version: testClaudeVersion, Libc: guestapi.LibcMusl}, []string{"bin/claude"},
			testClaudeVersion + " (Claude Code)", guestapi.HarnessRequires{Libc: guestapi.LibcMusl}},
		{BuiltinSpec{Name: BuiltinClaudeCode, Version: testClaudeNodeVersion}, []string{"bin/node", "lib/claude-code/cli.js"},
			testClaudeNodeVersion + " (Claude Code)",
			guestapi.HarnessRequires{Libc: guestapi.LibcGlibc, GlibcMin: "2.28", Libs: []string{"libgcc_s.so.1", "libstdc++.so.6"}}},
		{BuiltinSpec{Name: BuiltinCodex, Version: testCodexVersion}, []string{"lib/codex/bin/codex"},
			"codex-cli " + testCodexVersion, guestapi.HarnessRequires{Libc: guestapi.LibcNone}},
	}
	for _, tc := range tests {
		t.Run(tc.spec.Name+"@"+tc.spec.Version+tc.spec.Libc, func(t *testing.T) {
			t.Parallel()
			b := newTestBuilder(t, Config{CacheDir: cache})
			stage := filepath.Join(t.TempDir(), "stage")
			start := time.Now()
			d, err := b.StageBuiltin(context.Background(), tc.spec, stage)
			if errors.Is(err, ErrRegistry) {
				testutil.SkipOrFail(t, "the npm registry is unreachable: %v", err)
			}
			if err != nil {
				t.Fatalf("StageBuiltin: %v", err)
			}
			staged := time.Since(start)
			if !reflect.DeepEqual(d.Entrypoint, tc.entry) || !reflect.DeepEqual(d.Requires, tc.req) {
				t.Fatalf("entrypoint %q, requires %+v; want %q, %+v", d.Entrypoint, d.Requires, tc.entry, tc.req)
			}
			if tc.req.Libc == guestapi.LibcMusl {
				requireMuslLoader(t)
			}
			if out := runOffline(t, append(d.Argv(stage), "--version")); !strings.Contains(out, tc.want) {
				t.Fatalf("--version printed %q, want %q", out, tc.want)
			}
			start = time.Now()
			bundle, err := b.Build(context.Background(), BuildSpec{Dir: stage})
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			t.Logf("%s@%s: staged in %v, built in %v: %d MiB bundle (%d MiB of files, %d entries), %s",
				d.Name, d.Version, staged.Round(time.Millisecond), time.Since(start).Round(time.Millisecond),
				bundle.SizeBytes>>20, bundle.TreeBytes>>20, bundle.Entries, bundle.Digest)
		})
	}
}

// requireMuslLoader skips (fails under CI) without musl's loader, which a
// musl program needs on the host.
func requireMuslLoader(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/lib/ld-musl-x86_64.so.1"); err != nil {
		testutil.SkipOrFail(t, "no musl loader on this host (scripts/install-deps.sh installs musl): %v", err)
	}
}

// runOffline runs argv with an empty HOME, no network but loopback (a new
// network namespace when unshare can make one, else proxies that refuse),
// and a time limit; it returns the combined output.
func runOffline(t *testing.T, argv []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := []string{
		"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "LANG=C.UTF-8",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
	}
	if netns := unshareNet(); netns != nil {
		argv = append(netns, argv...)
	} else {
		for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
			env = append(env, v+"=http://127.0.0.1:9")
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v: %s", argv, err, out)
	}
	return string(out)
}

// unshareNet is the command prefix that runs a program in a new network
// namespace (only a loopback device), or nil when unshare cannot.
func unshareNet() []string {
	for _, prefix := range [][]string{{"unshare", "--net", "--"}, {"unshare", "--map-root-user", "--net", "--"}} {
		if exec.Command(prefix[0], append(prefix[1:], "true")...).Run() == nil {
			return prefix
		}
	}
	return nil
}
