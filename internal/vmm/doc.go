// Package vmm is the contract between the host agent and the mechanisms that
// run guests (process, qemu, firecracker). Each backend lives in its own
// package under vmm/ and passes the suite in vmm/vmmtest.
package vmm
