package adapter

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

// testdataLines reads a recorded CLI run (internal/modeltest/testdata).
func testdataLines(t *testing.T, name string) [][]byte {
	t.Helper()
	return jsonLines(t, filepath.Join("..", "..", "modeltest", "testdata", name))
}

// jsonLines reads a file of JSON lines.
func jsonLines(t *testing.T, p string) [][]byte {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		out = append(out, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// summarize renders events as "type:detail" for comparison.
func summarize(evs []pendingEvent) []string {
	var out []string
	for _, e := range evs {
		s := e.Type
		switch d := e.Data.(type) {
		case guestapi.AssistantTextData:
			s += ":" + d.Text
		case guestapi.ToolCallData:
			s += ":" + d.Name
		case guestapi.ToolResultData:
			s += fmt.Sprintf(":%s error=%v", d.ID, d.IsError)
		case guestapi.FileChangedData:
			s += ":" + d.Change + " " + d.Path
		case guestapi.UsageData:
			s += ":"
			if d.Model != "" {
				s += d.Model + " "
			}
			s += fmt.Sprintf("%d/%d", d.InputTokens, d.OutputTokens)
			if d.CacheReadTokens != 0 || d.CacheWriteTokens != 0 {
				s += fmt.Sprintf(" cache %d/%d", d.CacheReadTokens, d.CacheWriteTokens)
			}
		case guestapi.ErrorData:
			s += fmt.Sprintf(":%s %d", d.Kind, d.Status)
		case guestapi.QuestionData:
			s += ":" + d.Text
		}
		out = append(out, s)
	}
	return out
}

func TestClaudeNorm(t *testing.T) {
	t.Parallel()
	const printDir = "/tmp/TestClaudeWritesFileAndResumes2250719485/001"
	const streamDir = "/tmp/TestClaudeStreamJSONInput2262871835/001"
	firstTurn := []string{
		"assistant_text:I'll create the file.", "tool_call:Write", "tool_result:toolu_000000000000000000000001 error=false",
		"file_changed:create hello.txt", "assistant_text:Created hello.txt containing hi.",
	}
	tests := []struct {
		file, workdir string
		want          [][]string // events per turn (a turn ends at its result line)
		results       []string
		session       string
		auth          bool
	}{
		{"claude-print.jsonl", printDir, [][]string{append(slices.Clone(firstTurn), "usage:claude-opus-5-5 25089/25")},
			[]string{"Created hello.txt containing hi."}, "a5a08a5b-598f-4dd9-a731-d143740e1170", false},
		{"claude-print-resume.jsonl", printDir, [][]string{{"assistant_text:Earlier I created hello.txt.", "usage:claude-opus-5-5 12648/8"}},
			[]string{"Earlier I created hello.txt."}, "a5a08a5b-598f-4dd9-a731-d143740e1170", false},
		{"claude-stream-input.jsonl", streamDir, [][]string{
			append(slices.Clone(firstTurn), "usage:claude-opus-5-5 25080/25"),
			{"assistant_text:Earlier I created hello.txt.", "usage:claude-opus-5-5 12642/8"},
		}, []string{"Created hello.txt containing hi.", "Earlier I created hello.txt."}, "0bb17a92-58d6-4888-851c-a4b03fc8e4cc", false},
		{"claude-wrong-key-default-retries.jsonl", "/", [][]string{{"error:auth 401"}}, []string{""}, "3331079a-758d-4b14-bd84-e24fc87dc798", true},
		{"claude-wrong-key-max-retries-0.jsonl", "/", [][]string{{"error:auth 401", "usage:0/0"}},
			[]string{"Invalid API key · Fix external API key"}, "4710857c-db71-4708-87e2-32d98fd5f7c5", false},
		{"claude-wrong-key-x-should-retry-false.jsonl", "/", [][]string{{"error:auth 401", "usage:0/0"}},
			[]string{"Invalid API key · Fix external API key"}, "f4ac546e-112a-4e2a-bfa9-cb8ea9548898", false},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			var got [][]string
			var results []string
			n := newClaudeNorm(tt.workdir)
			var cur []pendingEvent
			for _, l := range testdataLines(t, tt.file) {
				cur = append(cur, n.line(l)...)
				if n.done || n.auth {
					got, results = append(got, summarize(cur)), append(results, n.result)
					if n.session != tt.session {
						t.Errorf("session %q, want %q", n.session, tt.session)
					}
					if n.auth != tt.auth {
						t.Errorf("auth = %v", n.auth)
					}
					cur, n = nil, newClaudeNorm(tt.workdir)
				}
			}
			if len(cur) > 0 {
				t.Errorf("events after the last result: %q", summarize(cur))
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || !slices.Equal(results, tt.results) {
				t.Errorf("turns:\n%q\nresults %q\nwant:\n%q\nresults %q", got, results, tt.want, tt.results)
			}
		})
	}
}

func TestClaudeNormSynthetic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		line string
		want []string
	}{
		{"question", `{"type":"assistant","message":{"content":[{"type":"tool_use","id":"q1","name":"AskUserQuestion","input":{"questions":[{"question":"Which file?"}]}}]}}`,
			[]string{"tool_call:AskUserQuestion", "question:Which file?"}},
		{"edit result", `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"e1","content":[{"type":"text","text":"ok"}]}]},"tool_use_result":{"filePath":"/w/a/b.go","oldString":"x"}}`,
			[]string{"tool_result:e1 error=false", "file_changed:update a/b.go"}},
		{"failed tool", `{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"e2","content":"no","is_error":true}]},"tool_use_result":{"filePath":"/w/c"}}`,
			[]string{"tool_result:e2 error=true"}},
		{"overloaded", `{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"result":"Overloaded","usage":{}}`,
			[]string{"usage:0/0", "error:model 529"}},
		{"max turns", `{"type":"result","subtype":"error_max_turns","is_error":true,"usage":{}}`,
			[]string{"usage:0/0", "error:harness 0"}},
		{"two models", `{"type":"result","subtype":"success","result":"ok","usage":{"input_tokens":9},"model_usage_since_last_result":{` +
			`"claude-sonnet-4-5":{"inputTokens":100,"cacheReadInputTokens":7,"cacheCreationInputTokens":3,"outputTokens":5,"costUSD":0.01},` +
			`"claude-haiku-4-5":{"inputTokens":20,"outputTokens":1,"costUSD":0.001}}}`,
			[]string{"usage:claude-haiku-4-5 20/1", "usage:claude-sonnet-4-5 110/5 cache 7/3"}},
		{"retry 500", `{"type":"system","subtype":"api_retry","error_status":500,"error":"server_error"}`, nil},
		{"not json", `garbage`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n := newClaudeNorm("/w")
			n.tools["e1"] = "Edit"
			if got := summarize(n.line([]byte(tt.line))); !slices.Equal(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
		})
	}
}

func TestShellNorm(t *testing.T) {
	t.Parallel()
	lines := []string{
		`{"type":"ready","harness":"shell","version":"1"}`,
		`{"type":"prompt","text":"echo hi; exit 3"}`,
		`{"type":"output","text":"hi"}`,
		`{"type":"result","exit_code":3}`,
		`{"type":"idle"}`,
	}
	n := &shellNorm{id: "sh-1"}
	var evs []pendingEvent
	for _, l := range lines {
		evs = append(evs, n.line([]byte(l))...)
	}
	want := []string{"tool_call:sh", "tool_result:sh-1 error=true"}
	if got := summarize(evs); !slices.Equal(got, want) || !n.done || n.output() != "hi\n" {
		t.Errorf("events %q done %v output %q; want %q", got, n.done, n.output(), want)
	}
	var in map[string]string
	if err := json.Unmarshal(evs[0].Data.(guestapi.ToolCallData).Input, &in); err != nil || in["command"] != "echo hi; exit 3" {
		t.Errorf("tool call input %v, %v", in, err)
	}
}

func TestCaps(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 20<<10)
	if got := capText(long, guestapi.MaxToolOutput); len(got) > guestapi.MaxToolOutput || !strings.HasSuffix(got, cutNote) || !strings.HasPrefix(got, "é") {
		t.Errorf("capText: %d bytes, suffix %q", len(got), got[len(got)-20:])
	}
	if got := capText("short", 10); got != "short" {
		t.Errorf("capText(short) = %q", got)
	}
	big := mustJSON(map[string]string{"file_path": "/w/a", "content": strings.Repeat("x", 200<<10)})
	var m map[string]string
	if got := capInput(big); len(got) > maxInputEvent || json.Unmarshal(got, &m) != nil || m["file_path"] != "/w/a" || len(m["content"]) > maxInputField {
		t.Errorf("capInput(object) = %d bytes", len(got))
	}
	arr := mustJSON([]string{strings.Repeat("x", 100<<10)})
	if got := string(capInput(arr)); !strings.Contains(got, `"truncated":true`) {
		t.Errorf("capInput(array) = %.100s", got)
	}
	for _, tc := range []struct{ dir, p, want string }{
		{"/w", "/w/a/b", "a/b"}, {"/w", "/x/y", "/x/y"}, {"/w", "/w", "."}, {"/w", "rel/p", "rel/p"}, {"/w", "/w/../etc", "/etc"},
	} {
		if got := relPath(tc.dir, tc.p); got != tc.want {
			t.Errorf("relPath(%q, %q) = %q, want %q", tc.dir, tc.p, got, tc.want)
		}
	}
}
