package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/vmm"
	"github.com/engrams/engrams/internal/vmm/vmproc"
)

// fakeVMM starts `sleep 60` marked as a QEMU of dir with spawn id spawn
// (no QEMU needed: Recover and the reaper go by the marker and the pid).
func fakeVMM(t *testing.T, dir, spawn string) vmm.Process {
	t.Helper()
	env, err := vmproc.MarkerEnv(dir, spawn)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	start, err := vmproc.StartTime(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return vmm.Process{PID: cmd.Process.Pid, StartTime: start}
}

// TestRecoverReapsWhatNoFinishedStartOwns: Recover kills every QEMU
// marked for the machine dir that no finished start recorded — a spawn
// whose record has no pid yet (the agent died right after spawning), one
// whose boot or restore never finished, an older spawn beside a recorded
// machine that is gone — and answers vmm.ErrGone with the files removed.
func TestRecoverReapsWhatNoFinishedStartOwns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		state func(spawned vmm.Process) *state // nil: no machine.json at all
	}{
		{"no record", func(vmm.Process) *state { return nil }},
		{"write-ahead record, no pid yet", func(vmm.Process) *state { return &state{Spawn: "s1", Starting: true} }},
		{"pid recorded, start not finished", func(p vmm.Process) *state {
			st := &state{Spawn: "s1", Starting: true}
			st.PID, st.StartTime = p.PID, p.StartTime
			return st
		}},
		{"a finished start whose QEMU is gone, another spawn running", func(vmm.Process) *state {
			st := &state{Spawn: "s0"}
			st.PID, st.StartTime = 1, 1 // init's pid with a start time it never had
			return st
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			spawned := fakeVMM(t, dir, "s1")
			if st := tt.state(spawned); st != nil {
				st.SessionID, st.Backend = "sess", "qemu"
				b, _ := json.Marshal(st)
				if err := os.WriteFile(filepath.Join(dir, fileMachine), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b := &Backend{log: slog.New(slog.DiscardHandler), checkpoint: func(context.Context, string) {}}
			if _, err := b.Recover(context.Background(), dir); !errors.Is(err, vmm.ErrGone) {
				t.Fatalf("Recover = %v, want ErrGone", err)
			}
			if vmproc.Alive(spawned.PID, spawned.StartTime) {
				t.Fatal("the marked QEMU survived Recover")
			}
			if _, err := os.Stat(filepath.Join(dir, fileMachine)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s left: %v", fileMachine, err)
			}
			vs, err := b.VMMs(context.Background(), dir)
			if err != nil || len(vs) != 0 {
				t.Fatalf("VMMs after Recover = %+v, %v", vs, err)
			}
		})
	}
}
