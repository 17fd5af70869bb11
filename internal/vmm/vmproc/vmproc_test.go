package vmproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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
