package host

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/engrams/engrams/internal/host/snapshots"
	"github.com/engrams/engrams/internal/vmm"
)

// TestDecideRecovery covers every combination of what a restarted agent
// finds in a machine dir: its record, a capture in flight, and what the
// backend's Recover answered.
func TestDecideRecovery(t *testing.T) {
	t.Parallel()
	records := []recordState{recordNone, recordUnreadable, recordOK}
	captures := []captureState{captureNone, capturePartial, captureComplete}
	vms := []vmState{vmGone, vmFailed, vmAttached}
	want := func(f found) recovery {
		switch {
		case f.record == recordNone:
			return forget
		case f.record == recordUnreadable:
			return trackLost
		case f.lazy && f.vm != vmFailed:
			return forget
		}
		return map[vmState][3]recovery{ // by capture: none, partial, complete
			vmGone:     {forget, forget, keepCapture},
			vmFailed:   {trackLost, trackLost, trackLost},
			vmAttached: {adopt, adoptPaused, adoptHeld},
		}[f.vm][f.capture]
	}
	for _, r := range records {
		for _, c := range captures {
			for _, v := range vms {
				for _, lazy := range []bool{false, true} {
					f := found{record: r, capture: c, vm: v, lazy: lazy}
					t.Run(fmt.Sprintf("record%d capture%d vm%d lazy=%v", r, c, v, lazy), func(t *testing.T) {
						t.Parallel()
						if got := decideRecovery(f); got != want(f) {
							t.Errorf("decideRecovery(%+v) = %s, want %s", f, got, want(f))
						}
					})
				}
			}
		}
	}
}

func TestRecoveryInputs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		local   *snapshots.Local
		partial bool
		err     error
		capture captureState
		vm      vmState
	}{
		{"nothing in flight, reattached", nil, false, nil, captureNone, vmAttached},
		{"partial files, backend found nothing", nil, true, fmt.Errorf("recover: %w", vmm.ErrGone), capturePartial, vmGone},
		{"complete capture (partial ones removed too), reattach failed", &snapshots.Local{SnapshotID: "s"}, true, errors.New("qmp refused"), captureComplete, vmFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := captureOf(tt.local, tt.partial); got != tt.capture {
				t.Errorf("captureOf = %d, want %d", got, tt.capture)
			}
			if got := vmOf(tt.err); got != tt.vm {
				t.Errorf("vmOf(%v) = %d, want %d", tt.err, got, tt.vm)
			}
		})
	}
}

// TestStrays: the VMMs found running (by their spawn marker) against the
// machines adopted: keep exactly those an adopted machine runs on.
func TestStrays(t *testing.T) {
	t.Parallel()
	dir := func(sid string) string { return "/data/machines/" + sid }
	proc := func(pid int, start uint64) vmm.Process { return vmm.Process{PID: pid, StartTime: start} }
	vmmOf := func(sid string, ps ...vmm.Process) vmm.VMM { return vmm.VMM{Dir: dir(sid), Processes: ps} }
	info := func(sid string, pid int, start uint64) vmm.Info {
		return vmm.Info{SessionID: sid, Dir: dir(sid), PID: pid, StartTime: start}
	}
	tests := []struct {
		name    string
		running []vmm.VMM
		adopted []vmm.Info
		reaped  []string // dirs of the VMMs reaped, in order
		tracked []string // dirs of machines tracked as lost
	}{
		{name: "nothing runs"},
		{"the adopted machine's VMM is kept", []vmm.VMM{vmmOf("a", proc(10, 100))}, []vmm.Info{info("a", 10, 100)}, nil, nil},
		{"a VMM with helpers is kept by its main process", []vmm.VMM{vmmOf("a", proc(10, 100), proc(11, 105))}, []vmm.Info{info("a", 10, 100)}, nil, nil},
		{"a spawn no record named (crash before its pid was recorded)", []vmm.VMM{vmmOf("a", proc(20, 200))}, nil, []string{dir("a")}, nil},
		{"an older spawn beside the adopted one", []vmm.VMM{vmmOf("a", proc(9, 90)), vmmOf("a", proc(10, 100))}, []vmm.Info{info("a", 10, 100)}, []string{dir("a")}, nil},
		{"same pid, other start time: a recycled pid is not the machine", []vmm.VMM{vmmOf("a", proc(10, 999))}, []vmm.Info{info("a", 10, 100)}, []string{dir("a")}, nil},
		{"the adopted pid under another dir", []vmm.VMM{vmmOf("b", proc(10, 100))}, []vmm.Info{info("a", 10, 100)}, []string{dir("b")}, nil},
		{"an image capture VMM nobody adopts", []vmm.VMM{{Dir: "/data/image-captures/j1", Processes: []vmm.Process{proc(30, 300)}}}, []vmm.Info{info("a", 10, 100)}, []string{"/data/image-captures/j1"}, nil},
		{"idle and deleted sessions have no adopted machine", []vmm.VMM{vmmOf("idle", proc(40, 400)), vmmOf("live", proc(41, 410))}, []vmm.Info{info("live", 41, 410)}, []string{dir("idle")}, nil},
		{"a machine tracked as lost is left to its destroy", []vmm.VMM{vmmOf("stuck", proc(50, 500)), vmmOf("ghost", proc(51, 510))}, nil, []string{dir("ghost")}, []string{dir("stuck")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, v := range strays(tt.running, tt.adopted, tt.tracked) {
				got = append(got, v.Dir)
			}
			if !slices.Equal(got, tt.reaped) {
				t.Errorf("reaped %v, want %v", got, tt.reaped)
			}
		})
	}
}
