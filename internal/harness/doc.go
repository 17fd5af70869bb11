// Package harness describes and builds agent harness bundles: a descriptor
// (harness.json) and a content-addressed read-only erofs image mounted in the
// guest at MountPoint; built in: claude-code and codex from npm, and shell.
package harness
