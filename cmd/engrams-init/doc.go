// Command engrams-init is the stage-1 init of engrams VMs: PID 1 in the initramfs
// built by vmimage (build it static, CGO_ENABLED=0). The work is in internal/guestinit;
// this only checks it runs as PID 1 and turns a fatal error into a visible exit.
package main
