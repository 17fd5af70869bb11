package guestinit

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeHarness records the system calls a Harness makes.
func fakeHarness(unmountErr, mountErr error) (*Harness, *[]string) {
	var calls []string
	h := &Harness{
		device: "serial:engrams-harness", dir: "/h",
		resolve: func(spec string, _ time.Duration) (string, error) {
			calls = append(calls, "resolve "+spec)
			return "/dev/vdc", nil
		},
		mkdir:   func(dir string) error { calls = append(calls, "mkdir "+dir); return nil },
		mount:   func(dev, dir string) error { calls = append(calls, "mount "+dev+" "+dir); return mountErr },
		unmount: func(dir string) error { calls = append(calls, "unmount "+dir); return unmountErr },
		flush:   func(dev string) error { calls = append(calls, "flush "+dev); return nil },
	}
	return h, &calls
}

func TestHarnessRemount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		unmountErr error
		mountErr   error
		calls      string
		err        string
	}{
		{"remounts", nil, nil, "resolve serial:engrams-harness,unmount /h,flush /dev/vdc,mkdir /h,mount /dev/vdc /h", ""},
		{"not mounted before", unix.EINVAL, nil, "resolve serial:engrams-harness,unmount /h,flush /dev/vdc,mkdir /h,mount /dev/vdc /h", ""},
		{"old bundle in use", unix.EBUSY, nil, "resolve serial:engrams-harness,unmount /h", "in use"},
		{"mount fails", nil, unix.EINVAL, "resolve serial:engrams-harness,unmount /h,flush /dev/vdc,mkdir /h,mount /dev/vdc /h", "mount harness /dev/vdc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h, calls := fakeHarness(tt.unmountErr, tt.mountErr)
			err := h.Remount()
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("remount = %v, want %q", err, tt.err)
			}
			if got := strings.Join(*calls, ","); got != tt.calls {
				t.Errorf("calls %s, want %s", got, tt.calls)
			}
		})
	}
}

func TestHarnessWithoutDisk(t *testing.T) {
	t.Parallel()
	h := newHarness("")
	if err := h.Mount(); err != nil {
		t.Errorf("mount without a harness disk = %v", err)
	}
	if err := h.Remount(); err == nil {
		t.Error("remount without a harness disk: want an error")
	}
	var none *Harness
	if err := none.Mount(); err != nil {
		t.Errorf("nil harness mount = %v", err)
	}
}

// TestControlRemountHarness checks a remount runs before the daemon
// restart, is answered, and that a failed one skips the restart.
func TestControlRemountHarness(t *testing.T) {
	t.Parallel()
	sup := NewSupervisor([]string{"/bin/true"}, slog.New(slog.DiscardHandler))
	h, calls := fakeHarness(nil, nil)
	rep := controller{sup: sup, harness: h}.handle([]byte(`{"id":4,"remount_harness":true,"restart":true}`))
	if !rep.OK || !rep.HarnessRemounted || len(*calls) == 0 {
		t.Fatalf("reply %+v, calls %v: want ok, remounted", rep, *calls)
	}
	busy, _ := fakeHarness(unix.EBUSY, nil)
	rep = controller{sup: sup, harness: busy}.handle([]byte(`{"id":5,"remount_harness":true,"restart":true}`))
	if rep.OK || rep.HarnessRemounted || !strings.Contains(rep.Error, "in use") {
		t.Fatalf("busy harness: reply %+v", rep)
	}
	rep = controller{sup: sup}.handle([]byte(`{"id":6,"remount_harness":true}`))
	if rep.OK || !strings.Contains(rep.Error, "no harness disk") {
		t.Fatalf("no harness disk: reply %+v", rep)
	}
}
