// Package adapter is the guest daemon's harness adapter: it runs the outbox's prompts as turns of the
// harness (Claude Code, Codex, shell) and keeps their normalized events in a durable log.
// Only the guest daemon (internal/guest) imports it; of this module it imports only guestapi.
package adapter
