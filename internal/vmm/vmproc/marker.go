package vmproc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/engrams/engrams/internal/vmm"
)

// The environment entries that mark a VMM process (and, by inheritance,
// every helper it runs) as started for one machine: a restarted host
// agent finds its VMMs by them, never by process name alone.
const (
	EnvMachineDir = "ENGRAMS_VMM_DIR"   // the machine dir, absolute
	EnvSpawn      = "ENGRAMS_VMM_SPAWN" // one id per spawn: tells incarnations in one dir apart
)

// NewSpawnID returns a fresh spawn id.
func NewSpawnID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// MarkerEnv is the environment that marks a VMM spawned for dir with
// spawn id spawn: append it to the VMM's environment.
func MarkerEnv(dir, spawn string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("mark vmm of %s: %w", dir, err)
	}
	return []string{EnvMachineDir + "=" + abs, EnvSpawn + "=" + spawn}, nil
}

// Marked is one live process carrying a VMM marker.
type Marked struct {
	vmm.Process
	Dir   string // its EnvMachineDir
	Spawn string // its EnvSpawn
}

// Scan lists the live (not zombie) processes marked as a VMM, or a helper
// of one, started for a machine dir under root.
func Scan(root string) ([]Marked, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("scan vmm processes under %s: %w", root, err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan vmm processes under %s: %w", root, err)
	}
	self := os.Getpid()
	var out []Marked
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone meanwhile, or not ours to read
		}
		dir, spawn := envValue(env, EnvMachineDir), envValue(env, EnvSpawn)
		if dir == "" || !under(abs, dir) {
			continue
		}
		state, start, err := stat(pid)
		if err != nil || state == "Z" || state == "X" {
			continue
		}
		out = append(out, Marked{Process: vmm.Process{PID: pid, StartTime: start}, Dir: dir, Spawn: spawn})
	}
	return out, nil
}

// envValue is the value of key in a NUL-separated environment block.
func envValue(env []byte, key string) string {
	for _, kv := range bytes.Split(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(key+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// under reports whether dir is root or inside it.
func under(root, dir string) bool {
	rel, err := filepath.Rel(root, filepath.Clean(dir))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Group makes one vmm.VMM per spawn (dir and spawn id) of ms, in a stable
// order.
func Group(ms []Marked) []vmm.VMM {
	type key struct{ dir, spawn string }
	idx := map[key]int{}
	var out []vmm.VMM
	for _, m := range ms {
		k := key{m.Dir, m.Spawn}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, vmm.VMM{Dir: m.Dir})
		}
		out[i].Processes = append(out[i].Processes, m.Process)
	}
	slices.SortFunc(out, func(a, b vmm.VMM) int {
		if c := strings.Compare(a.Dir, b.Dir); c != 0 {
			return c
		}
		return a.Processes[0].PID - b.Processes[0].PID
	})
	return out
}

// Reap sends SIGKILL to every process of v that is still the process it
// names and waits until they are gone or ctx ends.
func Reap(ctx context.Context, v vmm.VMM) error {
	for _, p := range v.Processes {
		Signal(p.PID, p.StartTime, unix.SIGKILL, false)
	}
	for _, p := range v.Processes {
		for Alive(p.PID, p.StartTime) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("reap vmm of %s: pid %d: %w", v.Dir, p.PID, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}
