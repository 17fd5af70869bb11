package adapter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/engrams/engrams/internal/guestapi"
)

// maxThreadID bounds the thread id codex names (kept in the turn state).
const maxThreadID = 256

// codexInitialize is the adapter's initialize request: it leaves out the
// streaming deltas and status chatter it does not read.
var codexInitialize = map[string]any{
	"clientInfo": map[string]any{"name": "engrams", "title": nil, "version": "1"},
	"capabilities": map[string]any{
		"experimentalApi": false, "requestAttestation": false,
		"optOutNotificationMethods": []string{
			"item/agentMessage/delta", "item/reasoning/textDelta", "item/reasoning/summaryTextDelta",
			"item/reasoning/summaryPartAdded", "item/commandExecution/outputDelta", "item/fileChange/outputDelta",
			"item/plan/delta", "turn/diff/updated", "account/rateLimits/updated", "remoteControl/status/changed",
		},
	},
}

// codexRunner drives one long-lived `codex app-server` process per
// conversation: a thread started once (resumed when the process is started
// again) and a turn/start per turn.
type codexRunner struct {
	pc     procConfig
	home   string
	thread string // the conversation (codex thread id)
	model  string // the thread's model as codex named it
	srv    *appServer
}

func (r *codexRunner) conversation() string { return r.thread }

func (r *codexRunner) close() {
	if r.srv != nil {
		r.srv.p.stop(r.pc.grace)
		r.srv = nil
	}
}

func (r *codexRunner) turn(ctx context.Context, t *turnRun) turnOutcome {
	n, out, ok := r.begin(ctx, t)
	if !ok {
		return out
	}
	end := r.pc.pump(ctx, r.srv.p, func(b []byte) bool {
		r.srv.dispatch(ctx, b, func(m rpcMessage) { t.emit(n.note(m)...) })
		return n.done
	})
	switch end {
	case pumpCancelled:
		r.interrupt(ctx, t, n)
		return turnOutcome{cancelled: true}
	case pumpStalled:
		r.close()
		return turnOutcome{err: stallError(r.pc.stall)}
	case pumpExited:
		why := r.srv.p.exitText(r.pc.stderrPath)
		r.close()
		return turnOutcome{result: n.result, err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness,
			Message: "codex ended before the turn did: " + why}}
	}
	if n.status == "interrupted" {
		return turnOutcome{result: n.result, err: &guestapi.ErrorData{Kind: guestapi.ErrorInterrupted, Message: "codex interrupted the turn"}}
	}
	return turnOutcome{result: n.result}
}

// begin makes sure an app-server serves the thread and starts the turn. A
// process that ended since the last turn is started again once, resuming
// the thread.
func (r *codexRunner) begin(ctx context.Context, t *turnRun) (*codexNorm, turnOutcome, bool) {
	announced := false
	for attempt := 0; ; attempt++ {
		err := r.launch(ctx, t)
		if !announced {
			announced = true
			t.emit(t.started(r.thread))
		}
		if err != nil {
			return nil, r.failed(ctx, "start codex app-server", err), false
		}
		model := t.model
		if model == "" || model == guestapi.AnyModel {
			model = r.model
		}
		n := newCodexNorm(t.workdir, model)
		input := []map[string]any{{"type": "text", "text": t.text, "text_elements": []any{}}}
		res, err := r.srv.call(ctx, "turn/start", map[string]any{"threadId": r.thread, "input": input},
			func(m rpcMessage) { t.emit(n.note(m)...) })
		if errors.Is(err, errAppServerExited) && attempt == 0 {
			r.pc.log.Warn("codex app-server had ended; starting it again", "thread", r.thread)
			r.close()
			continue
		}
		if err != nil {
			return nil, r.failed(ctx, "start the codex turn", err), false
		}
		var started struct {
			Turn struct {
				ID string `json:"id"`
			} `json:"turn"`
		}
		if json.Unmarshal(res, &started) != nil || started.Turn.ID == "" {
			return nil, r.failed(ctx, "start the codex turn", errors.New("the answer names no turn")), false
		}
		n.turn = started.Turn.ID
		return n, turnOutcome{}, true
	}
}

// failed stops the process after an error outside a turn's stream.
func (r *codexRunner) failed(ctx context.Context, what string, err error) turnOutcome {
	r.close()
	switch {
	case ctx.Err() != nil:
		return turnOutcome{cancelled: true}
	case errors.Is(err, errAppServerStalled):
		return turnOutcome{err: stallError(r.pc.stall)}
	case errors.Is(err, errAppServerExited):
		return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: "codex ended before the turn did: " + err.Error()}}
	}
	return turnOutcome{err: &guestapi.ErrorData{Kind: guestapi.ErrorHarness, Message: what + ": " + err.Error()}}
}

// interrupt asks codex to end the turn and reads its end for up to the
// grace time; a process that does not end the turn is stopped.
func (r *codexRunner) interrupt(ctx context.Context, t *turnRun, n *codexNorm) {
	ictx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.pc.grace)
	defer cancel()
	if _, err := r.srv.request(ictx, "turn/interrupt", map[string]string{"threadId": r.thread, "turnId": n.turn}); err == nil {
		r.pc.pump(ictx, r.srv.p, func(b []byte) bool {
			r.srv.dispatch(ictx, b, func(m rpcMessage) { t.emit(n.note(m)...) })
			return n.done
		})
	}
	if !n.done {
		r.pc.log.Warn("codex did not end the interrupted turn; stopping it", "thread", r.thread)
		r.close()
	}
}

// launch starts codex app-server for t unless one with t's parameters
// runs, writing its config.toml, and opens the thread.
func (r *codexRunner) launch(ctx context.Context, t *turnRun) error {
	key := fmt.Sprintf("%q %q %q %q %q", t.model, t.mode, t.workdir, t.gateway, t.env)
	if r.srv != nil && !r.srv.p.exited() && r.srv.key == key {
		return nil
	}
	r.close()
	codexHome := filepath.Join(r.home, ".codex")
	if err := writeCodexConfig(codexHome, t); err != nil {
		return err
	}
	env := append(append([]string{}, t.env...), "CODEX_HOME="+codexHome)
	argv := append(append([]string{}, t.argv...), "app-server")
	p, err := r.pc.startProc(procSpec{argv: argv, dir: t.workdir, env: env})
	if err != nil {
		return err
	}
	r.srv = &appServer{p: p, pc: r.pc, key: key}
	return r.open(ctx, t)
}

// open initializes the connection and resumes the thread, or starts one
// when there is none (or codex no longer has it).
func (r *codexRunner) open(ctx context.Context, t *turnRun) error {
	if _, err := r.srv.call(ctx, "initialize", codexInitialize, nil); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if err := r.srv.notify(ctx, "initialized"); err != nil {
		return err
	}
	params := map[string]any{"cwd": t.workdir, "approvalPolicy": "never"}
	if t.mode != "" {
		params["sandbox"] = t.mode
	}
	if r.thread != "" {
		resume := map[string]any{"threadId": r.thread, "excludeTurns": true}
		for k, v := range params {
			resume[k] = v
		}
		res, err := r.srv.call(ctx, "thread/resume", resume, nil)
		if err == nil {
			return r.useThread(res)
		}
		if refused := (*rpcError)(nil); !errors.As(err, &refused) {
			return fmt.Errorf("resume thread %s: %w", r.thread, err)
		}
		r.pc.log.Warn("codex cannot resume the thread; starting a new one", "thread", r.thread, "err", err)
	}
	res, err := r.srv.call(ctx, "thread/start", params, nil)
	if err != nil {
		return fmt.Errorf("start thread: %w", err)
	}
	return r.useThread(res)
}

// useThread records the thread a thread/start or thread/resume answer names.
func (r *codexRunner) useThread(res json.RawMessage) error {
	var v struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
		Model string `json:"model"`
	}
	if json.Unmarshal(res, &v) != nil || v.Thread.ID == "" || len(v.Thread.ID) > maxThreadID {
		return errors.New("codex answered without a usable thread id")
	}
	r.thread, r.model = v.Thread.ID, capText(v.Model, maxThreadID)
	return nil
}

// writeCodexConfig writes $CODEX_HOME/config.toml: the turn's model and
// sandbox mode, no approvals, nothing that reaches outside hosts, and the
// model provider at the gateway URL of the descriptor's first credential.
func writeCodexConfig(codexHome string, t *turnRun) error {
	if err := os.MkdirAll(codexHome, 0o700); err != nil {
		return fmt.Errorf("create codex home: %w", err)
	}
	var b strings.Builder
	if t.model != "" && t.model != guestapi.AnyModel {
		fmt.Fprintf(&b, "model = %q\n", t.model)
	}
	var cred *guestapi.HarnessCredential
	if len(t.desc.Credentials) > 0 && t.gateway != "" {
		cred = &t.desc.Credentials[0]
		b.WriteString("model_provider = \"engrams\"\n")
	}
	b.WriteString("approval_policy = \"never\"\n")
	if t.mode != "" {
		fmt.Fprintf(&b, "sandbox_mode = %q\n", t.mode)
	}
	b.WriteString(`check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

# The plugin sync and apps reach outside hosts at every start. The shell
# snapshot runs a login shell and a dozen small programs at every start
# (seconds under software emulation); the adapter sets the environment.
[features]
plugins = false
remote_plugin = false
apps = false
shell_snapshot = false
`)
	if cred != nil {
		fmt.Fprintf(&b, `
[model_providers.engrams]
name = "engrams"
base_url = %q
env_key = %q
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
`, t.gateway+"/"+cred.Kind, cred.Env)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write codex config: %w", err)
	}
	return nil
}
