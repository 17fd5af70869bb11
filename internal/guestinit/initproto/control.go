package initproto

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
)

// Control is one line of JSON the host sends on the control port. Every
// field is optional; init applies what is set and answers with a Reply.
// The host sends one at boot (identity and env before the daemon starts)
// and one after every restore (clock step and RNG reseed).
type Control struct {
	// ID matches the Reply. Hosts make it unique per message over the
	// machine's life, restores included (e.g. counting from a random
	// start): init restarts the daemon once per ID, so a message resent
	// after a lost reply does not restart it twice.
	ID           uint64            `json:"id"`
	Hostname     string            `json:"hostname,omitempty"`
	Env          map[string]string `json:"env,omitempty"`     // written to EnvFile, passed to the daemon on (re)start
	TimeUnixNano int64             `json:"time_unix_nano"`    // step CLOCK_REALTIME to this
	Entropy      []byte            `json:"entropy,omitempty"` // credited to the kernel RNG, then the CRNG is reseeded
	// RestartGuest restarts the guest daemon after the rest is applied, so
	// it starts with the new Env (a new identity). Init answers once the
	// new daemon runs, with its pid (Reply.GuestPID).
	RestartGuest bool `json:"restart,omitempty"`
	// RemountHarness mounts the harness disk again (its image changed: a
	// restore attached another bundle), before the daemon restarts. A
	// failure skips the restart. Init answers Reply.HarnessRemounted.
	RemountHarness bool `json:"remount_harness,omitempty"`
	// Nameserver, when set, is the resolver of the machine's network (an
	// IPv4 literal, the gateway): init writes /etc/resolv.conf naming it
	// only. Empty: the machine has no network, the file is left alone.
	Nameserver string `json:"nameserver,omitempty"`
}

// Reply answers a Control, and Hello (ID 0) is sent unprompted when init
// opens the port.
type Reply struct {
	ID     uint64 `json:"id"`
	OK     bool   `json:"ok"`
	Error  string `json:"error,omitempty"`
	BootID string `json:"boot_id,omitempty"`
	Hello  bool   `json:"hello,omitempty"`
	// GuestPID answers RestartGuest: the pid of the daemon started anew
	// (the old one has exited). 0 from an init that predates it, which
	// answered before the old daemon exited.
	GuestPID int `json:"guest_pid,omitempty"`
	// HarnessRemounted answers RemountHarness; false from an init that
	// predates it.
	HarnessRemounted bool `json:"harness_remounted,omitempty"`
}

// Bounds on what the host reads from the control port. Init runs in the
// guest, which is hostile (root, maybe prompt-injected): a reply's reader
// holds at most one line, and stops after a few that are not its answer.
const (
	// MaxReplyLine bounds one Reply line (4 KiB); init's are under 300
	// bytes, with an error message a few hundred more.
	MaxReplyLine = 4 << 10
	// MaxReplyLines bounds the lines read while waiting for one answer
	// (16): the hello and replies to messages resent before it.
	MaxReplyLines = 16
)

// ErrReplyBound: the control port sent more than a reply's bounds allow.
var ErrReplyBound = errors.New("init control reply over its bound")

// ReadReply reads replies from r until the one to message id: a line that
// is not a Reply (or answers another id) is skipped, a line over
// MaxReplyLine or more than MaxReplyLines lines is ErrReplyBound, and a read
// failure is returned as is.
func ReadReply(r *bufio.Reader, id uint64) (Reply, error) {
	for range MaxReplyLines {
		line, err := readLine(r)
		if err != nil {
			return Reply{}, err
		}
		var rep Reply
		if json.Unmarshal(line, &rep) == nil && rep.ID == id {
			return rep, nil
		}
	}
	return Reply{}, fmt.Errorf("%w: %d lines without the answer to message %d", ErrReplyBound, MaxReplyLines, id)
}

// readLine reads one line of at most MaxReplyLine bytes.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(line)+len(frag) > MaxReplyLine+1 { // +1: the newline
			return nil, fmt.Errorf("%w: a line over %d bytes", ErrReplyBound, MaxReplyLine)
		}
		line = append(line, frag...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}
