// Package tasks runs agent work: a task's session from its profile, repositories cloned on the
// coordinator, prompts into the harness through the outbox, harness events relayed by hosts into
// the conversation, follow-ups that outlive sessions. Imported by the API and cmd/ wiring.
package tasks
