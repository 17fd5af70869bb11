// Package vmmtest is the conformance suite every vmm backend runs: boot,
// exec, files, snapshot/restore, recover after a host-agent restart, destroy.
// Guest commands are POSIX sh and busybox/coreutils only.
package vmmtest
