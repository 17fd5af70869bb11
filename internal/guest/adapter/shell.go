package adapter

import (
	"context"
	"fmt"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// shellNorm turns the shell harness's output (guestapi.ShellEvent lines)
// for one prompt into harness events: the command is a tool call, its
// output the tool result and the turn's result.
type shellNorm struct {
	id     string // tool call id of the prompt
	out    strings.Builder
	cut    bool
	code   int
	done   bool // idle came
	exited bool // exit came
}

func (n *shellNorm) line(b []byte) []pendingEvent {
	e, err := guestapi.ParseShellEvent(b)
	if err != nil {
		return nil
	}
	switch e.Type {
	case guestapi.ShellEventPrompt:
		return []pendingEvent{{Type: guestapi.EventToolCall, Data: guestapi.ToolCallData{
			ID: n.id, Name: "sh", Input: mustJSON(map[string]string{"command": e.Text}),
		}}}
	case guestapi.ShellEventOutput:
		if n.out.Len()+len(e.Text)+1 > guestapi.MaxToolOutput {
			n.cut = true
			return nil
		}
		n.out.WriteString(e.Text)
		n.out.WriteByte('\n')
	case guestapi.ShellEventResult:
		n.code = *e.ExitCode
		return []pendingEvent{{Type: guestapi.EventToolResult, Data: guestapi.ToolResultData{
			ID: n.id, Output: n.output(), IsError: n.code != 0,
		}}}
	case guestapi.ShellEventIdle:
		n.done = true
	case guestapi.ShellEventExit:
		n.exited = true
	}
	return nil
}

func (n *shellNorm) output() string {
	s := n.out.String()
	if n.cut {
		s += cutNote
	}
	return s
}

// shellRunner drives one long-lived shell harness process.
type shellRunner struct {
	pc  procConfig
	p   *hproc
	key string
	n   int // prompts sent, for tool call ids
}

func (r *shellRunner) conversation() string { return "" }

func (r *shellRunner) close() {
	if r.p != nil {
		r.p.stop(r.pc.grace)
		r.p = nil
	}
}

func (r *shellRunner) turn(ctx context.Context, t *turnRun) turnOutcome {
	t.emit(t.started(""))
	key := fmt.Sprintf("%q %q", t.workdir, t.env)
	if r.p == nil || r.p.exited() || r.key != key {
		r.close()
		p, err := r.pc.startProc(procSpec{argv: t.argv, dir: t.workdir, env: t.env})
		if err != nil {
			return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: err.Error()}}
		}
		r.p, r.key = p, key
	}
	r.n++
	n := &shellNorm{id: fmt.Sprintf("sh-%d", r.n)}
	if _, err := r.p.stdin.Write([]byte(t.text + "\n")); err != nil {
		r.close()
		return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: "write the prompt: " + err.Error()}}
	}
	end := r.pc.pump(ctx, r.p, func(b []byte) bool {
		t.emit(n.line(b)...)
		return n.done
	})
	switch end {
	case pumpDone:
		return turnOutcome{result: n.output()}
	case pumpCancelled:
		r.close()
		return turnOutcome{cancelled: true}
	case pumpStalled:
		r.close()
		return turnOutcome{err: stallError(r.pc.stall)}
	}
	why := r.p.exitText(r.pc.stderrPath)
	r.close()
	return turnOutcome{result: n.output(), err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: "the shell harness ended before the turn did: " + why}}
}
