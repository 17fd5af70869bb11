package e2e

import (
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/coordinator"
)

// TestFlippedChunkByteRefusesResume: suspend a session (process backend,
// chunks in a local blob directory), flip one byte of one stored chunk, and
// use the session: the host verifies every chunk before any VMM starts,
// refuses, and the session ends Dead with a reason naming the corruption.
func TestFlippedChunkByteRefusesResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	creds := credentials(t, st, "h1")
	r := startReplica(t, st, "", coordinator.Config{})
	blobs, dir := shortTempDir(t), shortTempDir(t)
	h := startHostProcess(t, r.URL, creds.HostToken, dir, "--blob-dir", blobs)
	c := newClient(r.URL, creds.Token)
	waitHostReady(t, c, creds.HostID)
	s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	if _, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"sh", "-c", "head -c 300000 /dev/urandom > data.bin"}}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Sessions().Suspend(ctx, s.ID, true); err != nil || got.State != "idle" {
		t.Fatalf("suspend: %+v %v", got, err)
	}
	// The host's chunk cache would serve a good copy: stop it and clear it,
	// as on a host that never saw this session.
	h.kill()
	if err := os.RemoveAll(filepath.Join(dir, "chunk-cache")); err != nil {
		t.Fatal(err)
	}
	flipped := ""
	_ = filepath.WalkDir(blobs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || flipped != "" || !strings.Contains(p, "chunks") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 2 {
			return nil
		}
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		flipped = p
		return nil
	})
	if flipped == "" {
		t.Fatal("no chunk object found to corrupt")
	}
	startHostProcess(t, r.URL, creds.HostToken, dir, "--blob-dir", blobs)
	waitHostReady(t, c, creds.HostID)

	if _, err := c.Sessions().Exec(ctx, s.ID, apiv1.ExecRequest{Argv: []string{"true"}}, io.Discard, io.Discard); err == nil {
		t.Fatal("exec resumed a session whose snapshot has a corrupt chunk")
	}
	eventually(t, 30*time.Second, "session dead with the reason", func() (bool, string) {
		got, err := c.Sessions().Get(ctx, s.ID)
		return err == nil && got.State == "dead" && strings.Contains(got.Reason, "corrupt"), got.State + ": " + got.Reason
	})
	if ents, _ := os.ReadDir(filepath.Join(dir, "machines")); len(ents) != 0 {
		t.Fatalf("a machine was started for the corrupt snapshot: %d entries", len(ents))
	}
}

// TestDeleteRacingResume deletes Idle sessions 20–60 ms after a resume
// starts, 200 times (process backend, real host agent process): every one
// ends Completed and no machine or guest process is left behind.
func TestDeleteRacingResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	creds := credentials(t, st, "h1")
	r := startReplica(t, st, "", coordinator.Config{Workers: 8})
	blobs, dir := shortTempDir(t), shortTempDir(t)
	startHostProcess(t, r.URL, creds.HostToken, dir, "--blob-dir", blobs, "--log-level", "warn")
	c := newClient(r.URL, creds.Token)
	waitHostReady(t, c, creds.HostID)
	const rounds, workers = 200, 8
	ids := parallel(t, rounds, workers, func(i int) string {
		s, err := c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64, IdleTimeoutSec: -1}}, true)
		if err != nil || s.State != "active" {
			t.Errorf("create %d: %+v %v", i, s, err)
			return ""
		}
		if got, err := c.Sessions().Suspend(ctx, s.ID, true); err != nil || got.State != "idle" {
			t.Errorf("suspend %d: %+v %v", i, got, err)
			return s.ID
		}
		go func() { _, _ = c.Sessions().Resume(context.WithoutCancel(ctx), s.ID) }()
		time.Sleep(time.Duration(20+i%41) * time.Millisecond)
		if err := c.Sessions().Delete(ctx, s.ID, true); err != nil {
			t.Errorf("delete %d: %v", i, err)
		}
		return s.ID
	})
	for _, id := range ids {
		if id == "" {
			continue
		}
		eventually(t, 30*time.Second, "session completed", func() (bool, string) {
			got, err := c.Sessions().Get(ctx, id)
			var ops []string
			for _, o := range got.Ops {
				ops = append(ops, o.Kind+":"+o.State+":"+o.Error)
			}
			return err == nil && got.State == "completed", got.State + " " + got.Reason + " ops " + strings.Join(ops, ", ")
		})
	}
	eventually(t, 30*time.Second, "no machine left on the host", func() (bool, string) {
		ents, _ := os.ReadDir(filepath.Join(dir, "machines"))
		return len(ents) == 0, strconv.Itoa(len(ents)) + " machine dirs"
	})
	eventually(t, 30*time.Second, "no guest process left", func() (bool, string) {
		n := guestProcesses(dir)
		return n == 0, strconv.Itoa(n) + " guest processes"
	})
}

// guestProcesses counts processes whose command line mentions dir and
// engrams-guest.
func guestProcesses(dir string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if strings.Contains(string(b), "engrams-guest") && strings.Contains(string(b), dir) {
			if st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); strings.Contains(string(st), ") Z ") {
				continue
			}
			n++
		}
	}
	return n
}
