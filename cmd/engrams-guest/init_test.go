package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// TestPID1ReapsOrphans runs the daemon as PID 1 of a new PID namespace and
// checks that orphans of its commands do not stay zombies.
func TestPID1ReapsOrphans(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root for a PID namespace (unshare -p)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "engrams-guest")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	sockDir, err := os.MkdirTemp("", "pid1-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "g.sock")
	cmd := exec.Command(unshare, "--pid", "--fork", "--kill-child", "--mount-proc",
		bin, "--listen", "unix:"+sock, "--log-file", filepath.Join(dir, "guest.log"))
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c := guestapi.NewClient(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ready guestapi.Ready
	for {
		if ready, err = c.Ready(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "guest.log"))
			t.Skipf("daemon in a PID namespace did not answer (%v); log:\n%s", err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if ready.PID == 1 {
		t.Errorf("the daemon itself runs as PID 1 (%+v); it should run as init's child", ready)
	}
	run := func(script string) string {
		var out bytes.Buffer
		exit, err := c.Exec(ctx, guestapi.ExecStart{Argv: []string{"sh", "-c", script}}, nil, &out, &out)
		if err != nil || exit.ExitCode != 0 {
			t.Fatalf("exec %q: %+v %v %q", script, exit, err, out.String())
		}
		return strings.TrimSpace(out.String())
	}
	// Orphans: each subshell exits at once, its sleep is reparented to PID 1.
	run("for i in 1 2 3 4 5; do (sleep 0.05 </dev/null >/dev/null 2>&1 &); done")
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Count the orphans in any state: reaped ones disappear, unreaped
		// ones stay zombies forever.
		zombies := run(`n=0; for f in /proc/[0-9]*/stat; do read -r l < "$f" 2>/dev/null || continue; case "$l" in *"(sleep)"*) n=$((n+1));; esac; done; echo $n`)
		if zombies == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s orphans remain (zombies under PID 1)", zombies)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
