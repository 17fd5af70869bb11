package guestapi

import (
	"encoding/json"
	"fmt"
)

// The shell harness's protocol (HarnessProtocolShell), spoken by
// internal/harness/shell-harness.sh: the guest adapter writes each prompt
// as one line on the harness's stdin (a prompt cannot hold a line break);
// the harness runs it as a shell command in its working directory and
// writes one JSON object per line on stdout:
//
//	{"type":"ready","harness":"shell","version":"1"}  once, at start
//	{"type":"prompt","text":"..."}                   the prompt received
//	{"type":"output","text":"..."}                   one line of the command's output (stdout and stderr)
//	{"type":"result","exit_code":0}                  the command ended
//	{"type":"idle"}                                  waiting for the next prompt
//	{"type":"exit"}                                  stdin ended; the harness exits 0
const (
	ShellEventReady  = "ready"
	ShellEventPrompt = "prompt"
	ShellEventOutput = "output"
	ShellEventResult = "result"
	ShellEventIdle   = "idle"
	ShellEventExit   = "exit"
)

// ShellEvent is one line of the shell harness's output.
type ShellEvent struct {
	Type     string `json:"type"`
	Harness  string `json:"harness,omitempty"`   // ready
	Version  string `json:"version,omitempty"`   // ready
	Text     string `json:"text,omitempty"`      // prompt, output
	ExitCode *int   `json:"exit_code,omitempty"` // result
}

// ParseShellEvent decodes one line of the shell harness's output.
func ParseShellEvent(line []byte) (ShellEvent, error) {
	var e ShellEvent
	if err := json.Unmarshal(line, &e); err != nil {
		return ShellEvent{}, fmt.Errorf("parse shell harness event %.200q: %w", line, err)
	}
	switch e.Type {
	case ShellEventReady, ShellEventPrompt, ShellEventOutput, ShellEventIdle, ShellEventExit:
	case ShellEventResult:
		if e.ExitCode == nil {
			return ShellEvent{}, fmt.Errorf("parse shell harness event %.200q: a result without exit_code", line)
		}
	default:
		return ShellEvent{}, fmt.Errorf("parse shell harness event %.200q: unknown type %q", line, e.Type)
	}
	return e, nil
}
