// Package guestinit is the stage-1 init that runs as PID 1 in a VM: it loads modules,
// mounts the root and bundle disks, switches root, supervises engrams-guest and reaps
// zombies, and serves the host's control port (clock step, RNG reseed, identity).
package guestinit
