package adapter

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/guestapi"
)

// replayCodex feeds a recorded app-server run to the normalizer as the
// runner does: each turn/start answer begins a turn; notifications go to
// the turn's normalizer. It returns each turn's events and normalizer.
func replayCodex(t *testing.T, workdir string, lines [][]byte) ([][]string, []*codexNorm) {
	t.Helper()
	var evs [][]string
	var norms []*codexNorm
	for _, l := range lines {
		m, ok := decodeRPC(l)
		if !ok {
			t.Fatalf("not a JSON-RPC message: %.200s", l)
		}
		var res struct {
			Turn struct {
				ID string `json:"id"`
			} `json:"turn"`
		}
		if m.isResponse() && json.Unmarshal(m.Result, &res) == nil && res.Turn.ID != "" {
			n := newCodexNorm(workdir, "gpt-5.5")
			n.turn = res.Turn.ID
			norms, evs = append(norms, n), append(evs, nil)
			continue
		}
		if m.isNotification() && len(norms) > 0 {
			n := norms[len(norms)-1]
			evs[len(evs)-1] = append(evs[len(evs)-1], summarize(n.note(m))...)
		}
	}
	return evs, norms
}

func TestCodexNorm(t *testing.T) {
	t.Parallel()
	// The events codex exec --json gave for the same runs (the removed
	// exec normalizer's), but item ids and token counts: exec reported the
	// thread's running total on a resumed turn, the app-server the turn's.
	tests := []struct {
		file    string
		want    [][]string
		results []string
		status  []string
	}{
		{"codex-app-server-apply_patch.jsonl", [][]string{
			{"assistant_text:Creating hello.txt.", "tool_call:apply_patch", "tool_result:call_000000000000000000000002 error=false",
				"file_changed:create hello.txt", "assistant_text:Created hello.txt containing hi.", "usage:gpt-5.5 19206/24"},
			{"assistant_text:Earlier I created hello.txt.", "usage:gpt-5.5 9765/8"},
		}, []string{"Created hello.txt containing hi.", "Earlier I created hello.txt."}, []string{"completed", "completed"}},
		{"codex-app-server-exec_command.jsonl", [][]string{
			{"assistant_text:Creating hello.txt.", "tool_call:shell", "tool_result:call_000000000000000000000002 error=false",
				"assistant_text:Created hello.txt containing hi.", "usage:gpt-5.5 19204/24"},
			nil,
			{"assistant_text:Earlier I created hello.txt.", "usage:gpt-5.5 9887/8"},
		}, []string{"Created hello.txt containing hi.", "", "Earlier I created hello.txt."}, []string{"completed", "interrupted", "completed"}},
		{"codex-app-server-resume.jsonl", [][]string{{"assistant_text:Earlier I created hello.txt.", "usage:gpt-5.5 9767/8"}},
			[]string{"Earlier I created hello.txt."}, []string{"completed"}},
		{"codex-app-server-wrong-key.jsonl", [][]string{{"error:auth 401"}}, []string{""}, []string{"failed"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			evs, norms := replayCodex(t, "/w", jsonLines(t, filepath.Join("testdata", tt.file)))
			if len(evs) != len(tt.want) {
				t.Fatalf("%d turns, want %d: %q", len(evs), len(tt.want), evs)
			}
			for i := range evs {
				n := norms[i]
				if !slices.Equal(evs[i], tt.want[i]) || n.result != tt.results[i] || n.status != tt.status[i] || !n.done {
					t.Errorf("turn %d: events %q, result %q, status %q, done %v\nwant %q, %q, %q", i, evs[i], n.result, n.status, n.done, tt.want[i], tt.results[i], tt.status[i])
				}
			}
		})
	}
}

func TestCodexNormSynthetic(t *testing.T) {
	t.Parallel()
	note := func(method, params string) string { return `{"method":"` + method + `","params":` + params + `}` }
	item := func(method, it string) string { return note(method, `{"threadId":"th","turnId":"tu","item":`+it+`}`) }
	done := func(status, errJSON string) string {
		return note("turn/completed", `{"threadId":"th","turn":{"id":"tu","status":"`+status+`","error":`+errJSON+`}}`)
	}
	tests := []struct {
		name  string
		lines []string
		want  []string
	}{
		{"failed command", []string{item("item/completed", `{"id":"c","type":"commandExecution","command":"false","aggregatedOutput":"no","exitCode":1,"status":"failed"}`)},
			[]string{"tool_call:shell", "tool_result:c error=true"}},
		{"declined command", []string{item("item/started", `{"id":"c","type":"commandExecution","command":"rm -rf /","status":"inProgress"}`),
			item("item/completed", `{"id":"c","type":"commandExecution","command":"rm -rf /","status":"declined"}`)},
			[]string{"tool_call:shell", "tool_result:c error=true"}},
		{"delete", []string{item("item/completed", `{"id":"f","type":"fileChange","changes":[{"path":"/w/x","kind":{"type":"delete"}},{"path":"/elsewhere/y","kind":{"type":"update","move_path":null}}],"status":"completed"}`)},
			[]string{"tool_call:apply_patch", "tool_result:f error=false", "file_changed:delete x", "file_changed:update /elsewhere/y"}},
		{"failed patch", []string{item("item/completed", `{"id":"f","type":"fileChange","changes":[{"path":"/w/x","kind":{"type":"add"}}],"status":"failed"}`)},
			[]string{"tool_call:apply_patch", "tool_result:f error=true"}},
		{"mcp", []string{item("item/completed", `{"id":"m","type":"mcpToolCall","server":"s","tool":"t","arguments":{"a":1},"status":"completed","result":{"content":[{"type":"text","text":"ok"}]}}`)},
			[]string{"tool_call:s.t", "tool_result:m error=false"}},
		{"model error", []string{note("error", `{"turnId":"tu","willRetry":true,"error":{"message":"Reconnecting... 1/5","codexErrorInfo":"serverOverloaded"}}`),
			done("failed", `{"message":"unexpected status 500 Internal Server Error: boom","codexErrorInfo":{"responseStreamConnectionFailed":{"httpStatusCode":500}}}`)},
			[]string{"error:model 500"}},
		{"forbidden", []string{done("failed", `{"message":"no","codexErrorInfo":{"httpConnectionFailed":{"httpStatusCode":403}}}`)}, []string{"error:auth 403"}},
		{"unauthorized", []string{done("failed", `{"message":"no","codexErrorInfo":"unauthorized"}`)}, []string{"error:auth 0"}},
		{"failed without error", []string{done("failed", `null`)}, []string{"error:model 0"}},
		{"another turn", []string{
			note("thread/tokenUsage/updated", `{"turnId":"old","tokenUsage":{"last":{"inputTokens":5,"outputTokens":5}}}`),
			item("item/completed", `{"id":"x","type":"agentMessage","text":"hi"}`),
			note("item/completed", `{"turnId":"old","item":{"id":"y","type":"agentMessage","text":"old"}}`),
			note("turn/completed", `{"turn":{"id":"old","status":"completed"}}`),
			note("thread/tokenUsage/updated", `{"turnId":"tu","tokenUsage":{"last":{"inputTokens":7,"cachedInputTokens":2,"outputTokens":3}}}`),
			done("interrupted", `null`),
			done("completed", `null`)},
			[]string{"assistant_text:hi", "usage:m 7/3 cache 2/0"}},
		{"not params", []string{`{"method":"item/completed","params":[1]}`, `{"method":"turn/completed","params":"x"}`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newCodexNorm("/w", "m")
			n.turn = "tu"
			var evs []pendingEvent
			for _, l := range tt.lines {
				m, ok := decodeRPC([]byte(l))
				if !ok {
					t.Fatalf("decode %s", l)
				}
				evs = append(evs, n.note(m)...)
			}
			if got := summarize(evs); !slices.Equal(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecodeRPC(t *testing.T) {
	t.Parallel()
	tests := []struct {
		line string
		ok   bool
		kind string // request, notification, response
	}{
		{`{"id":1,"result":{}}`, true, "response"},
		{`{"id":"a","error":{"code":-32600,"message":"no"}}`, true, "response"},
		{`{"id":7,"method":"item/fileChange/requestApproval","params":{}}`, true, "request"},
		{`{"method":"turn/started","params":{}}`, true, "notification"},
		{`{"id":null,"method":"x"}`, true, "notification"},
		{`{"id":1.5,"result":{}}`, false, ""},
		{`{"id":{"a":1},"result":{}}`, false, ""},
		{`{"id":"` + strings.Repeat("a", maxRPCID) + `","result":{}}`, false, ""},
		{`{"result":{}}`, false, ""},
		{`[]`, false, ""},
		{`not json`, false, ""},
	}
	for _, tt := range tests {
		m, ok := decodeRPC([]byte(tt.line))
		kind := ""
		switch {
		case !ok:
		case m.isRequest():
			kind = "request"
		case m.isNotification():
			kind = "notification"
		case m.isResponse():
			kind = "response"
		}
		if ok != tt.ok || kind != tt.kind {
			t.Errorf("%.60s: ok %v kind %q, want %v %q", tt.line, ok, kind, tt.ok, tt.kind)
		}
	}
	if _, ok := decodeRPC(make([]byte, maxHarnessLine+1)); ok {
		t.Error("a line over the limit decoded")
	}
}

func TestRPCAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, want string
	}{
		{"item/commandExecution/requestApproval", `{"decision":"decline"}`},
		{"item/fileChange/requestApproval", `{"decision":"decline"}`},
		{"execCommandApproval", `{"decision":{"denied":{"rejection":"the session's approval policy is never"}}}`},
		{"item/tool/requestUserInput", `error -32601`},
		{"account/chatgptAuthTokens/refresh", `error -32601`},
	}
	for _, tt := range tests {
		res, rerr := rpcAnswer(rpcMessage{ID: json.RawMessage(`1`), Method: tt.method})
		got := ""
		if rerr != nil {
			got = "error " + strconv.FormatInt(rerr.Code, 10)
		} else {
			b, _ := json.Marshal(res)
			got = string(b)
		}
		if got != tt.want {
			t.Errorf("%s: %s, want %s", tt.method, got, tt.want)
		}
	}
}

// FuzzCodexAppServerLine: any line from codex app-server (the guest's
// harness is not trusted) decodes or is dropped, never panics, and yields
// few, bounded events.
func FuzzCodexAppServerLine(f *testing.F) {
	for _, name := range []string{"codex-app-server-apply_patch.jsonl", "codex-app-server-wrong-key.jsonl"} {
		lines, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		for _, l := range bytes.Split(lines, []byte("\n")) {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"method":"item/completed","params":{"turnId":"tu","item":{"type":"fileChange","id":"f","changes":[{"path":"../x","kind":{"type":"add"}}]}}}`))
	f.Add([]byte(`{"id":"x","method":"item/commandExecution/requestApproval","params":{}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		n := newCodexNorm("/w", "m")
		n.turn = "tu"
		m, ok := decodeRPC(line)
		if !ok {
			return
		}
		if m.isRequest() {
			if res, rerr := rpcAnswer(m); (res == nil) == (rerr == nil) {
				t.Fatalf("answer %v, error %v", res, rerr)
			}
		}
		evs := n.note(m)
		if len(evs) > 3+maxFileChanges || len(n.called) > maxCalled {
			t.Fatalf("%d events, %d calls remembered", len(evs), len(n.called))
		}
		for _, e := range evs {
			b, err := json.Marshal(e.Data)
			if err != nil || len(b) > 2*guestapi.MaxToolOutput+maxTextEvent {
				t.Fatalf("%s event of %d bytes: %v", e.Type, len(b), err)
			}
		}
	})
}

// TestCodexRunnerHostileServer runs the codex runner against fake
// app-servers (shell scripts) that misbehave: each turn ends with an error
// the adapter chose, in bounded time.
func TestCodexRunnerHostileServer(t *testing.T) {
	t.Parallel()
	const answerInit = `read -r l; echo '{"id":1,"result":{}}'; read -r l; `
	tests := []struct {
		name, script, want string
	}{
		{"exits at once", `exit 3`, "codex ended before the turn did"},
		{"talks without answering", `while :; do echo '{"method":"x","params":{}}'; done`, "without answering initialize"},
		{"garbage", `head -c 100000 /dev/urandom; echo; sleep 60`, "printed nothing"},
		{"refuses the thread", answerInit + `read -r l; echo '{"id":2,"error":{"code":-32600,"message":"no"}}'; sleep 60`, "start thread: no (code -32600)"},
		{"no thread id", answerInit + `read -r l; echo '{"id":2,"result":{"thread":{}}}'; sleep 60`, "without a usable thread id"},
		{"turn without id", answerInit + `read -r l; echo '{"id":2,"result":{"thread":{"id":"th"}}}'; read -r l; echo '{"id":3,"result":{}}'; sleep 60`,
			"the answer names no turn"},
		{"dies in the turn", answerInit + `read -r l; echo '{"id":2,"result":{"thread":{"id":"th"}}}'; read -r l; echo '{"id":3,"result":{"turn":{"id":"tu"}}}'; exit 1`,
			"codex ended before the turn did"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			bin := filepath.Join(dir, "codex")
			if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+tt.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r := &codexRunner{home: dir, pc: procConfig{stderrPath: filepath.Join(dir, "stderr.log"),
				grace: time.Second, stall: 2 * time.Second, log: slogDiscard()}}
			defer r.close()
			var evs []pendingEvent
			tr := &turnRun{name: "t1", text: "hi", workdir: dir, argv: []string{bin}, env: []string{"PATH=/usr/bin:/bin"},
				emitFn: func(e ...pendingEvent) { evs = append(evs, e...) }}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			out := r.turn(ctx, tr)
			if out.err == nil || !strings.Contains(out.err.Message, tt.want) || out.cancelled {
				t.Errorf("outcome %+v, want an error with %q", out, tt.want)
			}
			if len(evs) != 1 || evs[0].Type != guestapi.EventRunStarted {
				t.Errorf("events %q", summarize(evs))
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
}

// TestCodexRunnerInterruptIgnored: a server that does not end an
// interrupted turn is stopped after the grace time.
func TestCodexRunnerInterruptIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "codex")
	script := `read -r l; echo '{"id":1,"result":{}}'; read -r l; read -r l; echo '{"id":2,"result":{"thread":{"id":"th"}}}'; ` +
		`read -r l; echo '{"id":3,"result":{"turn":{"id":"tu"}}}'; trap '' INT; while :; do sleep 1; done`
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &codexRunner{home: dir, pc: procConfig{stderrPath: filepath.Join(dir, "stderr.log"),
		grace: 500 * time.Millisecond, stall: time.Minute, log: slogDiscard()}}
	defer r.close()
	tr := &turnRun{name: "t1", text: "hi", workdir: dir, argv: []string{bin}, env: []string{"PATH=/usr/bin:/bin"},
		emitFn: func(...pendingEvent) {}}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if out := r.turn(ctx, tr); !out.cancelled {
		t.Errorf("outcome %+v, want cancelled", out)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	if r.srv != nil || r.thread != "th" {
		t.Errorf("server %v kept, thread %q", r.srv, r.thread)
	}
}
