package initproto

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
