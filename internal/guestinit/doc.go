// Package guestinit is the stage-1 init that runs as PID 1 in a Linux VM: it loads modules, mounts the
// disks, switches root, supervises engrams-guest, reaps zombies and serves the host's control port
// (protocol in guestinit/initproto). Only cmd/engrams-init imports it.
package guestinit
