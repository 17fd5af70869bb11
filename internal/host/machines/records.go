package machines

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/engrams/engrams/internal/host/hostfs"
	"github.com/engrams/engrams/internal/hostlink"
)

const (
	machinesDir  = "machines"
	epochsDir    = "epochs"
	snapshotsDir = "snapshots"          // inside a machine dir: kept when the machine goes
	recordFile   = "engrams-agent.json" // inside a machine dir: what the agent needs to recover it
)

// RecordFile is the name of the machine record inside a machine dir.
const RecordFile = recordFile

// Record is persisted in the machine's dir.
type Record struct {
	SessionID string `json:"session_id"`
	Epoch     int64  `json:"epoch"`
	MemoryMiB int    `json:"memory_mib"`
	VCPUs     int    `json:"vcpus"`
	Paused    bool   `json:"paused,omitempty"`
	// Harness and HarnessID name the machine's harness bundle, so a
	// recovered machine relays its harness events and serves its gateway.
	Harness   string `json:"harness,omitempty"`
	HarnessID string `json:"harness_id,omitempty"`
	// Egress and Brokered are the machine's egress policy, so a recovered
	// machine's network path serves it again.
	Egress   []string `json:"egress,omitempty"`
	Brokered []string `json:"brokered,omitempty"`
}

// Spec is the part of a machine's spec its record keeps.
func (r Record) Spec() hostlink.MachineSpec {
	return hostlink.MachineSpec{MemoryMiB: r.MemoryMiB, VCPUs: r.VCPUs, Harness: r.Harness, HarnessID: r.HarnessID,
		Egress: r.Egress, Brokered: r.Brokered}
}

// Dir is sid's machine dir.
func (r *Registry) Dir(sid string) string { return filepath.Join(r.cfg.DataDir, machinesDir, sid) }

// Root is the data dir every machine dir (and image capture dir) is in.
func (r *Registry) Root() string { return r.cfg.DataDir }

// SessionOf names the session whose machine dir is dir, if dir is one.
func (r *Registry) SessionOf(dir string) (string, bool) {
	root, err1 := filepath.Abs(filepath.Join(r.cfg.DataDir, machinesDir))
	d, err2 := filepath.Abs(dir)
	if err1 != nil || err2 != nil || filepath.Dir(d) != root || !hostfs.ValidName(filepath.Base(d)) {
		return "", false
	}
	return filepath.Base(d), true
}

// WriteRecord durably records sid's machine, so a restarted agent
// recovers it.
func (r *Registry) WriteRecord(sid string, epoch int64, spec hostlink.MachineSpec, paused bool) error {
	b, err := json.Marshal(Record{SessionID: sid, Epoch: epoch, MemoryMiB: spec.MemoryMiB, VCPUs: spec.VCPUs, Paused: paused,
		Harness: spec.Harness, HarnessID: spec.HarnessID, Egress: spec.Egress, Brokered: spec.Brokered})
	if err != nil {
		return err
	}
	return hostfs.WriteFileSync(r.Dir(sid), recordFile, b)
}

// ReadRecord reads the record of sid's machine. An error wrapping
// os.ErrNotExist means none was written; on any other error the record
// holds what could be read (at least the session id).
func (r *Registry) ReadRecord(sid string) (Record, error) {
	rec := Record{SessionID: sid}
	b, err := os.ReadFile(filepath.Join(r.Dir(sid), recordFile))
	if err == nil {
		err = json.Unmarshal(b, &rec)
	}
	return rec, err
}

// Sessions lists the sessions that have a machine dir, creating the
// machines dir if needed.
func (r *Registry) Sessions() ([]string, error) {
	root := filepath.Join(r.cfg.DataDir, machinesDir)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create machines dir: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list machines dir: %w", err)
	}
	var sids []string
	for _, e := range entries {
		if e.IsDir() && hostfs.ValidName(e.Name()) {
			sids = append(sids, e.Name())
		}
	}
	return sids, nil
}

// Dirs lists every entry of the machines dir, as paths.
func (r *Registry) Dirs() []string {
	root := filepath.Join(r.cfg.DataDir, machinesDir)
	entries, _ := os.ReadDir(root)
	dirs := make([]string, len(entries))
	for i, e := range entries {
		dirs[i] = filepath.Join(root, e.Name())
	}
	return dirs
}

// CleanDir removes a gone machine's dir, except its snapshots and the
// entries named keep (the dir stays while any is kept).
func CleanDir(dir string, keep ...string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("clean machine dir %s: %w", dir, err)
	}
	keep = append(keep, snapshotsDir)
	kept := false
	for _, e := range entries {
		if slices.Contains(keep, e.Name()) {
			kept = true
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clean machine dir %s: %w", dir, err)
		}
	}
	if !kept {
		_ = os.Remove(dir)
	}
	return nil
}
