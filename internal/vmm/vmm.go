package vmm

import (
	"context"
	"errors"
	"net"
	"os"
	"time"
)

// Error categories callers branch on.
var (
	ErrGone         = errors.New("machine gone")           // Recover found nothing to reattach
	ErrUnsupported  = errors.New("unsupported by backend") // e.g. snapshot on a backend without it
	ErrGuestTimeout = errors.New("guest did not answer in time")
	ErrPaused       = errors.New("machine paused") // Dial between Pause (or Snapshot) and Resume
)

// Capabilities describe what a backend can do on this host, and why not.
type Capabilities struct {
	Name           string // "process", "qemu", "firecracker"
	Version        string // VMM version, part of a snapshot's identity
	Acceleration   string // "kvm", "tcg", "none"
	Isolation      bool   // false for process: no isolation at all
	SnapshotMemory bool   // snapshot keeps processes and memory
	SnapshotDisk   bool   // snapshot keeps the disk
	RootFS         bool   // boots a caller's root filesystem (Spec.RootFS)
	Harness        bool   // attaches a harness bundle (Spec.Harness) at boot and at restore
	Network        bool   // attaches a caller's TAP device (Spec.Network) as the guest's NIC
	LazyMemory     bool   // maps a snapshot's memory file where it is (Snapshot.ServedMemory): it may fill on demand
	Reason         string // why this backend/acceleration was chosen, or what is missing
}

// Spec is what a machine is booted or restored with.
type Spec struct {
	SessionID string
	Epoch     int64
	Dir       string // private working directory for this machine, created by the caller
	MemoryMiB int
	VCPUs     int
	Env       map[string]string // environment for processes the guest daemon starts
	Hostname  string
	// RootFS, when set, is the machine's root filesystem instead of the
	// backend's default root image. Backends without Capabilities.RootFS
	// fail Boot and Restore with an error wrapping ErrUnsupported. A
	// snapshot of such a machine records RootFS.ID; restoring it needs a
	// Spec.RootFS with the same ID (its Path may differ), and restoring a
	// snapshot of a default-root machine needs none. Either mismatch fails
	// with an error wrapping ErrUnsupported.
	RootFS *RootFS
	// Harness, when set, is the agent harness bundle the guest mounts
	// read-only at /.engrams-harness (guestapi.HarnessMountPoint): Path is
	// a read-only erofs image (harness.Builder builds one), ID its content
	// identity (e.g. "sha256:<hex>" of the image). It is attached to the
	// machine, never copied into its root disk, at Boot and at every
	// Restore; without it the mount point is an empty file system. A
	// snapshot records the ID it ran with. Restore compares it with this
	// one (nil: none): with Rebind a different bundle replaces the one the
	// snapshot saw before the guest daemon restarts (a base snapshot taken
	// without a harness serves sessions with any harness version); without
	// Rebind a different one fails with an error wrapping ErrUnsupported
	// (a running session's harness cannot change under it), as does any
	// Harness given to a snapshot that predates harness disks, or to a
	// backend without Capabilities.Harness. The file must not change while
	// a machine uses it; a backend may bound its size (QEMU: 8 GiB).
	Harness *RootFS
	// Rebind (Restore only) gives the restored machine a new identity: the
	// snapshot is a base restored into many machines. Before Restore
	// returns, Hostname and Env are applied and the guest daemon is
	// restarted, so the daemon and every process it starts afterwards see
	// them; processes running at snapshot time keep what they had. The
	// clock is stepped and the RNG reseeded as on every restore. Without
	// Rebind the restored daemon keeps the environment it had (Env applies
	// from its next restart).
	Rebind bool
	// Network, when set, is the machine's only network: a TAP device the
	// caller made (package vmnet: a network namespace of the machine's own
	// holding just that TAP, whose nftables rules send every TCP
	// connection of the guest to the caller's proxy and its DNS to the
	// caller's resolver, and drop everything else). The backend hands it
	// to the VMM as the guest's NIC at Boot and at every Restore; a
	// restore takes a fresh one (the guest's addresses are the same in
	// every namespace, so a snapshot resumes behind any host's). nil: the
	// guest reaches nothing (QEMU: a NIC on restricted user networking).
	// Backends without Capabilities.Network fail Boot and Restore with an
	// error wrapping ErrUnsupported, as does a Restore of a snapshot
	// whose machine had no NIC. The caller keeps it open while the
	// machine runs and closes it after Destroy; the backend never closes
	// it.
	Network *Network
}

// Network is a machine's network attachment (Spec.Network).
type Network struct {
	// Tap is an open TAP device (IFF_TAP|IFF_NO_PI, no virtio-net header),
	// attached in the namespace it was opened in. The VMM inherits it.
	Tap *os.File
}

// RootFS is a caller's root filesystem for a machine (Spec.RootFS), or a
// harness bundle (Spec.Harness: Path is then an erofs image, never a
// copy-on-write base, and ID is compared on restore as RootFS.ID is).
type RootFS struct {
	// Path is a raw ext4 image (vmimage.(*Builder).TreeImage builds one),
	// possibly shared read-only by every machine of that image on the
	// host. The backend never writes it: the machine's root disk is a
	// copy-on-write layer over it. It must not change while a machine or
	// a snapshot of one uses it.
	Path string
	// ID is the caller's stable identity of Path's content, the same on
	// every host (e.g. "sha256:<hex>" of its chunk manifest). Snapshots
	// record it and restores compare it; backends never hash the file,
	// which may be many GiB.
	ID string
}

// Snapshot names the files a backend wrote for one saved machine. Paths are
// inside the directory given to Machine.Snapshot.
type Snapshot struct {
	Backend string
	Files   map[string]string // role ("memory", "state", "disk") -> path
	Taken   time.Time
	// ServedMemory (restore only, with Capabilities.LazyMemory): the
	// "memory" file is served in place (a pager fills it on first touch),
	// so the backend maps it where it is and never reads or copies it.
	ServedMemory bool
}

// Info is what a host agent persists to reattach after a restart.
type Info struct {
	SessionID string    `json:"session_id"`
	Backend   string    `json:"backend"`
	PID       int       `json:"pid"`
	StartTime uint64    `json:"start_time"` // /proc/<pid>/stat field 22, guards against pid reuse
	Dir       string    `json:"dir"`
	Socket    string    `json:"socket"` // guest channel
	Created   time.Time `json:"created"`
	// TapFD is the fd number the VMM process holds Spec.Network's TAP
	// at (0: none): an agent restarted while the machine runs finds the
	// machine's network namespace through it (vmnet.Rejoin).
	TapFD int `json:"tap_fd,omitempty"`
}

// Backend runs machines.
type Backend interface {
	Capabilities() Capabilities
	// Boot starts a machine and returns once its guest daemon answers.
	Boot(ctx context.Context, spec Spec) (Machine, error)
	// Restore starts a new machine from a snapshot and returns once its guest
	// daemon answers. ErrUnsupported if the backend cannot. A backend may
	// link snap's files into the machine (QEMU uses "memory" as its live
	// RAM), so they change as it runs: restore a set of files once.
	Restore(ctx context.Context, spec Spec, snap Snapshot) (Machine, error)
	// Recover reattaches to a machine this backend started before the host
	// agent restarted, from the Info it persisted in dir. It returns ErrGone
	// (after reaping whatever was left) if the machine cannot be reattached.
	Recover(ctx context.Context, dir string) (Machine, error)
}

// Machine is one running guest.
type Machine interface {
	Info() Info
	// Dial opens a new stream to the guest daemon.
	Dial(ctx context.Context) (net.Conn, error)
	// Snapshot pauses the machine and writes memory, device state and disk
	// into dir. The machine stays paused; Destroy it or Resume it. A file
	// may share storage with the live machine (QEMU hard-links its guest
	// RAM file as "memory"): it stays valid while the machine is paused and
	// after Destroy, but Resume changes it. Read (chunk) the files before
	// resuming.
	Snapshot(ctx context.Context, dir string) (Snapshot, error)
	// Pause stops the machine's vCPUs (processes, for the process backend)
	// without saving anything: a host whose lease expired stops writing.
	Pause(ctx context.Context) error
	// Resume continues a machine paused by Pause or Snapshot.
	Resume(ctx context.Context) error
	// Destroy stops the machine and removes every process, socket and file
	// it created outside dir's snapshot files. Idempotent.
	Destroy(ctx context.Context) error
	// Done is closed when the machine exits for any reason.
	Done() <-chan struct{}
}

// Process names one process: a pid and its start time (field 22 of
// /proc/<pid>/stat), which together never name another process.
type Process struct {
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// VMM is one VMM a backend started, as found running: the machine dir it
// was started for (absolute) and every live process carrying its spawn
// marker (the VMM and the helpers it runs, e.g. a migration writer).
type VMM struct {
	Dir       string
	Processes []Process
}

// Reaper is what a backend whose VMM processes outlive the host agent
// adds, so that a restarted agent finds every VMM of its own — also one
// that no machine record names, such as a spawn the previous agent did
// not live to record — and reaps each one it did not recover. A backend
// marks every VMM at spawn with the machine dir it serves and a spawn id
// (in its environment); it never finds them by process name alone.
type Reaper interface {
	// VMMs lists the running VMMs this backend started for a machine dir
	// under root (an absolute or relative path), one per spawn.
	VMMs(ctx context.Context, root string) ([]VMM, error)
	// Reap kills every process of v that is still the process it names and
	// returns once they are gone (or ctx ends), removing what the backend
	// kept for that VMM outside the machine dir (its cgroup).
	Reap(ctx context.Context, v VMM) error
}
