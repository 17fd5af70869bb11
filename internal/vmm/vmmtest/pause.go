package vmmtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/vmm"
)

// Pause check parameters: the machine stays paused for pauseFor; the
// background counter (about 10 increments a second while running) may
// advance at most maxPausedAdvance between the reads around the pause.
const (
	pauseFor       = 3 * time.Second
	pausedExecWait = 1500 * time.Millisecond
	rateWindow     = 2 * time.Second
)

// checkPause pauses the machine: the background counter must stop and an
// exec must not complete; after Resume both work again.
func (h Harness) checkPause(t *testing.T, g guest) {
	c0 := h.readBackground(t, g)
	time.Sleep(rateWindow)
	before := h.readBackground(t, g)
	rate := float64(before.count-c0.count) / rateWindow.Seconds()
	t.Logf("background counter runs at about %.1f/s before the pause", rate)
	ctx := h.ctx(t)
	if err := g.m.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	paused := time.Now()
	resumed := false
	defer func() {
		if !resumed {
			_ = g.m.Resume(context.Background())
		}
	}()
	ectx, cancel := context.WithTimeout(ctx, pausedExecWait)
	var out bytes.Buffer
	exit, err := g.c.Exec(ectx, sh("echo ran-while-paused"), nil, &out, &out)
	cancel()
	if err == nil {
		t.Errorf("exec completed on a paused machine: %q %+v", out.String(), exit)
	}
	time.Sleep(time.Until(paused.Add(pauseFor)))
	if err := g.m.Resume(ctx); err != nil {
		t.Fatalf("resume after pause: %v", err)
	}
	resumed = true
	after := h.readBackground(t, g)
	t.Logf("paused %v: counter %d -> %d", time.Since(paused).Round(time.Millisecond), before.count, after.count)
	if after.pid != before.pid {
		t.Fatalf("background process changed across pause: pid %d -> %d", before.pid, after.pid)
	}
	// Resume may include reconnecting to the guest while it already runs,
	// so compare with what the counter would have done without a pause
	// over the same time: at least a quarter of the pause must be missing.
	elapsed := time.Since(paused).Seconds()
	unpaused := rate * elapsed
	if d := float64(after.count - before.count); d > unpaused-rate*pauseFor.Seconds()/4 {
		t.Errorf("background counter advanced by %.0f in %.1fs across a %v pause; unpaused it would be about %.0f", d, elapsed, pauseFor, unpaused)
	}
	h.poll(t, "the background counter continues after Resume", func() bool {
		return h.readBackground(t, g).count > after.count
	})
	if out, exit := run(t, h, g, sh("echo resumed"), ""); out != "resumed\n" || exit.ExitCode != 0 {
		t.Errorf("exec after resume: %q %+v", out, exit)
	}
}

// snapshotResume snapshots the machine and resumes it in place: the same
// processes go on.
func (h Harness) snapshotResume(t *testing.T, g guest) {
	dir, err := os.MkdirTemp("", "vmmtest-snap0-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	before := h.readBackground(t, g)
	if _, err := g.m.Snapshot(h.ctx(t), dir); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	if err := g.m.Resume(h.ctx(t)); err != nil {
		t.Fatalf("resume after snapshot: %v", err)
	}
	if out, exit := run(t, h, g, sh("echo resumed"), ""); out != "resumed\n" || exit.ExitCode != 0 {
		t.Fatalf("exec after snapshot and resume: %q %+v", out, exit)
	}
	h.poll(t, "the background counter continues after snapshot and resume", func() bool {
		now := h.readBackground(t, g)
		return now.pid == before.pid && now.count > before.count
	})
}

// relocate moves every snapshot file into a fresh directory under new
// names, as a host restoring from chunks would, and checks no file names
// the directory it was written to or the machine's directory.
func relocate(t *testing.T, snap vmm.Snapshot, snapDir, machineDir string) vmm.Snapshot {
	t.Helper()
	dst, err := os.MkdirTemp("", "vmmtest-chunks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dst) })
	out := snap
	out.Files = map[string]string{}
	for role, p := range snap.Files {
		for _, dir := range []string{snapDir, machineDir} {
			if embedsString(t, p, dir) {
				t.Errorf("snapshot file %s embeds the directory %s: it cannot be restored elsewhere", role, dir)
			}
		}
		np := filepath.Join(dst, "restored-"+role)
		if err := moveFile(p, np); err != nil {
			t.Fatalf("move snapshot file %s: %v", role, err)
		}
		out.Files[role] = np
	}
	if err := os.RemoveAll(snapDir); err != nil {
		t.Fatal(err)
	}
	return out
}

func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	o, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(o, in); err != nil {
		o.Close()
		return err
	}
	if err := o.Close(); err != nil {
		return err
	}
	return os.Remove(src)
}

// embedsString reports whether the file at p contains s.
func embedsString(t *testing.T, p, s string) bool {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("read snapshot file: %v", err)
	}
	defer f.Close()
	needle := []byte(s)
	buf := make([]byte, 4<<20)
	keep := 0
	for {
		n, err := f.Read(buf[keep:])
		if bytes.Contains(buf[:keep+n], needle) {
			return true
		}
		if err == io.EOF {
			return false
		}
		if err != nil {
			t.Fatalf("read snapshot file: %v", fmt.Errorf("%s: %w", p, err))
		}
		// Carry the tail over, so a match across reads is found.
		k := min(len(needle)-1, keep+n)
		copy(buf, buf[keep+n-k:keep+n])
		keep = k
	}
}

func outboxEntries(from, to int64) []guestapi.OutboxEntry {
	var out []guestapi.OutboxEntry
	for s := from; s <= to; s++ {
		out = append(out, guestapi.OutboxEntry{Seq: s, ID: fmt.Sprintf("vmmtest-%d", s), Kind: "vmmtest"})
	}
	return out
}

// applyOutbox applies outbox entries 1..2 and syncs the guest's disks
// before a snapshot.
func (h Harness) applyOutbox(t *testing.T, g guest) {
	st, err := g.c.Outbox(h.ctx(t), outboxEntries(1, 2))
	if err != nil || st.Applied != 2 {
		t.Fatalf("outbox apply 1..2 = %+v, %v", st, err)
	}
	if err := g.c.Sync(h.ctx(t)); err != nil {
		t.Fatalf("guest sync: %v", err)
	}
}

// checkOutboxRestored checks the restored guest applied exactly what the
// snapshot's state had: redelivering 1..3 applies only 3.
func (h Harness) checkOutboxRestored(t *testing.T, g guest) {
	if st, err := g.c.OutboxState(h.ctx(t)); err != nil || st.Applied != 2 {
		t.Errorf("outbox state after restore = %+v, %v; want applied 2", st, err)
	}
	if st, err := g.c.Outbox(h.ctx(t), outboxEntries(1, 3)); err != nil || st.Applied != 3 {
		t.Errorf("outbox redelivery of 1..3 after restore = %+v, %v; want applied 3", st, err)
	}
}
