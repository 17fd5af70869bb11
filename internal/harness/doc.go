// Package harness builds agent harness bundles: a tree described by its harness.json
// (guestapi.HarnessDescriptor) packed into a content-addressed read-only erofs image
// mounted in the guest at guestapi.HarnessMountPoint; built in: claude-code and codex from npm, and shell.
package harness
