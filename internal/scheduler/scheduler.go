package scheduler

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/domain"
)

// ErrNoCapacity is returned when no host can take the request; the error
// text says why each host was passed over.
var ErrNoCapacity = errors.New("no host can run this session")

// Candidate is one host and its load as the coordinator sees it.
type Candidate struct {
	HostID      domain.HostID
	Ready       bool // connected and not draining
	Tried       bool // already tried for this placement (it refused it): passed over
	MemoryMiB   int  // total the host offers to sessions
	VCPUs       int
	MaxSessions int // 0: unlimited
	// Placed is what sessions already assigned to this host use.
	PlacedMemoryMiB int
	PlacedVCPUs     int
	PlacedSessions  int
	// Incompatible says why this host cannot run the request (restore the
	// snapshot, boot the image) ("" if it can); Cached: it holds the snapshot's chunks.
	Incompatible string
	Cached       bool
	// EvictIdleAfter is the host's eviction floor: to make room, only
	// sessions idle at least this long are suspended (MakeRoom); negative:
	// the host evicts none.
	EvictIdleAfter time.Duration
}

// Request is what a session needs.
type Request struct {
	MemoryMiB int
	VCPUs     int
}

// Place picks, among hosts that fit the request, one that caches the
// snapshot if any does, then the one with the most free memory; ties go to
// fewer sessions, then to the smaller id so the choice is stable.
func Place(cands []Candidate, req Request) (domain.HostID, error) {
	var fits []Candidate
	var why []string
	for _, c := range cands {
		if reason := rejects(c, req); reason != "" {
			why = append(why, string(c.HostID)+": "+reason)
			continue
		}
		fits = append(fits, c)
	}
	if len(fits) == 0 {
		if len(cands) == 0 {
			return "", fmt.Errorf("%w: no hosts are registered (start one with `engrams host run`)", ErrNoCapacity)
		}
		sort.Strings(why)
		return "", fmt.Errorf("%w: %s", ErrNoCapacity, strings.Join(why, "; "))
	}
	sort.Slice(fits, func(i, j int) bool {
		if fits[i].Cached != fits[j].Cached {
			return fits[i].Cached
		}
		fi, fj := free(fits[i]), free(fits[j])
		if fi != fj {
			return fi > fj
		}
		if fits[i].PlacedSessions != fits[j].PlacedSessions {
			return fits[i].PlacedSessions < fits[j].PlacedSessions
		}
		return fits[i].HostID < fits[j].HostID
	})
	return fits[0].HostID, nil
}

func free(c Candidate) int { return c.MemoryMiB - c.PlacedMemoryMiB }

func rejects(c Candidate, req Request) string {
	switch {
	case !c.Ready:
		return "not ready"
	case c.Tried:
		return "tried already (it refused)"
	case c.Incompatible != "":
		return "incompatible: " + c.Incompatible
	case c.MaxSessions > 0 && c.PlacedSessions >= c.MaxSessions:
		return fmt.Sprintf("at its limit of %d sessions", c.MaxSessions)
	case free(c) < req.MemoryMiB:
		return fmt.Sprintf("%d MiB free, %d MiB asked", free(c), req.MemoryMiB)
	case c.VCPUs > 0 && c.VCPUs*domain.VCPUOvercommit-c.PlacedVCPUs < req.VCPUs:
		// vCPUs are overcommitted; memory is not.
		return fmt.Sprintf("%d vCPUs placed on %d", c.PlacedVCPUs, c.VCPUs)
	}
	return ""
}

// Compatible says why a host with facts h cannot restore a snapshot taken
// on a host with facts snap, or "" if it can: a saved machine state needs
// the same architecture, VMM, VMM version and acceleration, and with
// hardware acceleration the same CPU model.
func Compatible(snap, h domain.HostFacts) string {
	switch {
	case snap.Arch != h.Arch:
		return fmt.Sprintf("architecture %s, snapshot needs %s", h.Arch, snap.Arch)
	case snap.Backend.Name != h.Backend.Name:
		return fmt.Sprintf("backend %s, snapshot needs %s", h.Backend.Name, snap.Backend.Name)
	case snap.Backend.Version != h.Backend.Version:
		return fmt.Sprintf("%s %q, snapshot needs %q", h.Backend.Name, h.Backend.Version, snap.Backend.Version)
	case snap.Backend.Acceleration != h.Backend.Acceleration:
		return fmt.Sprintf("acceleration %s, snapshot needs %s", h.Backend.Acceleration, snap.Backend.Acceleration)
	case snap.Backend.Acceleration == "kvm" && snap.CPUModel != h.CPUModel:
		return fmt.Sprintf("CPU %q, snapshot needs %q", h.CPUModel, snap.CPUModel)
	}
	return ""
}
