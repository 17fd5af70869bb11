package vmproc

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/vmm"
)

func TestProcessIdentityWatchAndStop(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { _ = cmd.Wait(); close(reaped) }() // we are its parent: reap it
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	if err != nil || !Alive(pid, start) {
		t.Fatalf("StartTime %d, %v; alive %v", start, err, Alive(pid, start))
	}
	if Alive(pid, start+1) {
		t.Fatal("a different start time names the same process")
	}
	done := make(chan struct{})
	WatchExit(pid, start, done)
	if !Stop(pid, start, 2*time.Second, true) {
		t.Fatal("Stop did not stop sleep")
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("WatchExit never saw the exit")
	}
	<-reaped
	if Alive(pid, start) {
		t.Fatal("still alive after Stop")
	}
	WatchExit(pid, start, make(chan struct{})) // must not block or panic on a gone process
}

func TestReadPIDFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		content string
		want    int
		ok      bool
	}{{"123\n", 123, true}, {"0", 0, false}, {"x", 0, false}, {"-4", 0, false}}
	for i, tt := range tests {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadPIDFile(p)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ReadPIDFile(%q) = %d, %v", tt.content, got, err)
		}
	}
}

// startMarked starts `sleep 60` with env added and reaps it when it ends.
func startMarked(t *testing.T, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd
}

func TestScanFindsMarkedProcessesUnderRootOnly(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	mdir := filepath.Join(root, "machines", "s1")
	mark := func(dir, spawn string) []string {
		env, err := MarkerEnv(dir, spawn)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	tests := []struct {
		name   string
		env    []string
		listed bool
	}{
		{"marked for a machine under root", mark(mdir, "a"), true},
		{"a second spawn in the same dir", mark(mdir, "b"), true},
		{"marked for another data dir", mark(filepath.Join(t.TempDir(), "machines", "s1"), "c"), false},
		{"a sibling whose name only starts like root", mark(root+"-other/machines/s1", "d"), false},
		{"same program, no marker", nil, false},
		{"marker that is not a whole entry", []string{"X" + EnvMachineDir + "=" + mdir}, false},
	}
	pids := map[int]string{}
	for _, tt := range tests {
		pids[startMarked(t, tt.env...).Process.Pid] = tt.name
	}
	found, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, m := range found {
		if name, ok := pids[m.PID]; ok {
			got[name] = true
			if m.Dir != mdir || !Alive(m.PID, m.StartTime) {
				t.Errorf("%s: found as %+v", name, m)
			}
		}
	}
	for _, tt := range tests {
		if got[tt.name] != tt.listed {
			t.Errorf("%s: listed %v, want %v", tt.name, got[tt.name], tt.listed)
		}
	}
	groups := Group(found)
	if len(groups) != 2 || groups[0].Dir != mdir || len(groups[0].Processes) != 1 {
		t.Fatalf("Group = %+v, want two spawns of %s", groups, mdir)
	}
	for _, g := range groups {
		if err := Reap(context.Background(), g); err != nil {
			t.Fatal(err)
		}
		for _, p := range g.Processes {
			if Alive(p.PID, p.StartTime) {
				t.Errorf("pid %d alive after Reap", p.PID)
			}
		}
	}
	if left, _ := Scan(root); len(left) != 0 {
		t.Fatalf("after Reap, Scan = %+v", left)
	}
}

func TestReapSparesAReusedPID(t *testing.T) {
	t.Parallel()
	cmd := startMarked(t)
	pid := cmd.Process.Pid
	start, err := StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	stale := vmm.VMM{Dir: "/x", Processes: []vmm.Process{{PID: pid, StartTime: start + 1}}}
	if err := Reap(context.Background(), stale); err != nil {
		t.Fatal(err)
	}
	if !Alive(pid, start) {
		t.Fatal("Reap killed a process whose start time differs from the one named")
	}
}
