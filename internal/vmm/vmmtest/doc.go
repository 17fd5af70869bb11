// Package vmmtest is the conformance suite every vmm backend runs: boot, exec,
// files, pause, snapshot/resume, snapshot/restore from relocated files, recover
// after a host-agent restart, destroy. Guest commands are POSIX sh and busybox.
package vmmtest
