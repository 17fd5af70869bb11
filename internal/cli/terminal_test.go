package cli_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
)

// hostile is what a guest or an image might print to take over the
// terminal of whoever reads it: a clipboard write (OSC 52), screen clear
// and cursor home (CSI), a window title, BEL, a full reset (ESC c), C1
// controls encoded in UTF-8 (CSI U+009B, OSC U+009D), bytes that are not
// UTF-8 and a carriage return that would overwrite the line.
const hostile = "a\x1b]52;c;ZXZpbA==\x07b\x1b[2J\x1b[Hc\x1b]0;pwned\x07d\x07e\x1bcf\u009b31mg\u009d8;;x\u009ch\xff\xfei\rj"

// hostileMarks are sequences of hostile that must reach a pipe intact.
var hostileMarks = []string{"\x1b]52;c;ZXZpbA==\x07", "\x1b[2J\x1b[H", "\x1bc", "\u009b31m", "\rj"}

// cleanMarks are what a terminal shows of hostile: its text, inert.
var cleanMarks = []string{"a]52;c;ZXZpbA==b[2J[Hc]0;pwnedde", "cf31mg8;;xh"}

// ttyWriter is an output stream the CLI takes for a terminal: it has a
// file descriptor that the test's IsTerminal says is one.
type ttyWriter struct {
	bytes.Buffer
	fd uintptr
}

func (w *ttyWriter) Fd() uintptr { return w.fd }

const ttyFD = 1000 // never a real descriptor here; only isTTY knows it

func isTTY(fd int) bool { return fd == ttyFD }

// hostileAPI answers every route the commands under test read with
// hostile in each field a guest or an image controls.
func hostileAPI(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	j := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	failed := apiv1.ImageJob{ID: "j1", ImageID: "i1", Kind: "enable", State: apiv1.ImageJobFailed, Error: "warm-up exited 1: " + hostile,
		OutputTail: "npm ERR! " + hostile + "\nsecond line\n", CreatedAt: clienttest.BaseTime()}
	img := apiv1.Image{ID: "i1", Name: "web", Ref: "reg/web:1", State: "failed", LastJob: &failed, CreatedAt: clienttest.BaseTime(),
		Config: apiv1.ImageConfig{Env: map[string]string{"PS1": hostile}, Workdir: "/src" + hostile, Entrypoint: []string{hostile}}}
	mux.HandleFunc("GET /v1/tasks/{id}", func(w http.ResponseWriter, r *http.Request) {
		j(w, 200, apiv1.Task{ID: r.PathValue("id"), Title: "t", State: "failed", Error: "clone: " + hostile})
	})
	mux.HandleFunc("GET /v1/tasks/{id}/events", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		b, _ := json.Marshal(apiv1.TaskEvent{Seq: 1, Type: "assistant_text", Data: mustJSON(map[string]string{"text": hostile}), Time: clienttest.BaseTime()})
		fmt.Fprintf(w, "id: 1\nevent: assistant_text\ndata: %s\n\n", b)
	})
	mux.HandleFunc("GET /v1/tasks/{id}/diff", func(w http.ResponseWriter, _ *http.Request) {
		j(w, 200, apiv1.TaskDiff{Repos: []apiv1.RepoDiff{{Path: "app", Diff: "diff --git a/x b/x\n+" + hostile + "\n"}}})
	})
	mux.HandleFunc("GET /v1/tasks/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("path") == "dir" {
			j(w, 200, []apiv1.FileInfo{{Name: "x" + hostile, Size: 1, Mode: "-rw-r--r--"}})
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write([]byte(hostile))
	})
	mux.HandleFunc("GET /v1/images/{name}", func(w http.ResponseWriter, _ *http.Request) { j(w, 200, img) })
	mux.HandleFunc("GET /v1/images/{name}/jobs", func(w http.ResponseWriter, _ *http.Request) {
		j(w, 200, apiv1.ImageJobList{Items: []apiv1.ImageJob{failed}})
	})
	mux.HandleFunc("POST /v1/images", func(w http.ResponseWriter, _ *http.Request) {
		j(w, 200, apiv1.ImageJobResponse{Image: img, Job: failed})
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") == "gone" {
			j(w, 404, apiv1.Error{Code: apiv1.CodeNotFound, Error: "session gone: " + hostile})
			return
		}
		j(w, 200, apiv1.Session{ID: "s1", State: "active", Reason: hostile, Spec: apiv1.SessionSpec{Env: map[string]string{"X": hostile}},
			Ops: []apiv1.Op{{ID: "o1", Kind: "evict", State: "failed", Error: "suspend failed: " + hostile}}})
	})
	mux.HandleFunc("GET /v1/sessions/{id}/events", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		b, _ := json.Marshal(apiv1.Event{Seq: 1, Type: "harness", Data: mustJSON(map[string]string{"line": hostile}), Time: clienttest.BaseTime()})
		fmt.Fprintf(w, "id: 1\nevent: harness\ndata: %s\n\n", b)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/egress", hostileEgress)
	mux.HandleFunc("GET /v1/sessions/{id}/exec/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		if _, _, err := c.Read(r.Context()); err != nil { // ExecStart
			return
		}
		_ = c.Write(r.Context(), websocket.MessageBinary, append([]byte{apiv1.ChanStdout}, hostile...))
		b, _ := json.Marshal(apiv1.ExecControl{Type: apiv1.ControlExit, ExitCode: 0, Error: "guest says " + hostile})
		_ = c.Write(r.Context(), websocket.MessageText, b)
	})
	// A host reports its own facts; a compromised one may say anything.
	hostFacts := apiv1.Host{ID: "h1", Name: "h", State: "ready", Facts: apiv1.HostFacts{Hostname: hostile, CPUModel: hostile, Kernel: hostile,
		Backend:   apiv1.BackendFacts{Name: "qemu" + hostile, Reason: hostile},
		Available: []apiv1.BackendFacts{{Name: "fc", Reason: hostile}}}}
	mux.HandleFunc("GET /v1/hosts", func(w http.ResponseWriter, _ *http.Request) {
		j(w, 200, apiv1.HostList{Items: []apiv1.Host{hostFacts}})
	})
	mux.HandleFunc("GET /v1/hosts/{id}", func(w http.ResponseWriter, _ *http.Request) { j(w, 200, hostFacts) })
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts.URL
}

// hostileEgress answers a session's egress log: a guest chooses the names
// it asks for, and reasons quote them.
func hostileEgress(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(apiv1.EgressList{Events: []apiv1.EgressEvent{{Seq: 1, Time: clienttest.BaseTime(), Kind: apiv1.EgressDNS,
		Host: hostile + ".test", Port: 53, Verdict: apiv1.EgressDeny, Reason: "not allowed: " + hostile}}})
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// checkInert fails unless s is UTF-8 without a control character but
// newline and tab.
func checkInert(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s is not UTF-8: %q", what, s)
	}
	for _, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f)) {
			t.Errorf("%s holds control character %U: %q", what, r, s)
			return
		}
	}
}

// TestTerminalSafety runs each command that prints guest- or
// image-controlled bytes with its output on a terminal (control
// characters stripped, the text still shown) and on a pipe (exact bytes).
func TestTerminalSafety(t *testing.T) {
	t.Parallel()
	url := hostileAPI(t)
	tests := []struct {
		name   string
		args   []string
		stderr bool // the hostile bytes go to stderr
		raw    bool // a pipe gets them exactly (not through JSON, which replaces non-UTF-8)
		code   int
		exec   bool // stdout is the command's own, raw (TestExecOutputIsRaw)
	}{
		{name: "task diff", args: []string{"task", "diff", "t1"}},
		{name: "task diff json", args: []string{"task", "diff", "--json", "t1"}},
		{name: "task files file", args: []string{"task", "files", "t1", "f.txt"}, raw: true},
		{name: "task files dir", args: []string{"task", "files", "t1", "dir"}},
		{name: "task files dir json", args: []string{"task", "files", "--json", "t1", "dir"}},
		{name: "task show", args: []string{"task", "show", "t1"}},
		{name: "task show json", args: []string{"task", "show", "--json", "t1"}},
		{name: "image get", args: []string{"image", "get", "web"}},
		{name: "image get json", args: []string{"image", "get", "--json", "web"}},
		{name: "image jobs", args: []string{"image", "jobs", "web"}},
		{name: "image enable: warm-up output and error", args: []string{"image", "enable", "reg/web:1", "--name", "web"}, stderr: true, code: 1},
		{name: "session logs", args: []string{"session", "logs", "s1"}},
		{name: "session logs json", args: []string{"session", "logs", "--json", "s1"}},
		{name: "session get", args: []string{"session", "get", "s1"}},
		{name: "session egress", args: []string{"session", "egress", "s1"}},
		{name: "session egress json", args: []string{"session", "egress", "--json", "s1"}},
		{name: "host list", args: []string{"host", "list"}},
		{name: "host get", args: []string{"host", "get", "h1"}},
		{name: "host get json", args: []string{"host", "get", "--json", "h1"}},
		{name: "error message", args: []string{"session", "get", "gone"}, stderr: true, code: 1},
		{name: "exec: the session's error", args: []string{"session", "exec", "s1", "--", "x"}, stderr: true, code: 126, exec: true},
	}
	for _, tt := range tests {
		for _, tty := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/tty=%v", tt.name, tty), func(t *testing.T) {
				t.Parallel()
				out, errw := &ttyWriter{}, &ttyWriter{}
				if tty {
					out.fd, errw.fd = ttyFD, ttyFD
				}
				root := cli.NewRoot(cli.Options{
					Stdin: strings.NewReader(""), Stdout: out, Stderr: errw, IsTerminal: isTTY,
					Getenv: func(k string) string {
						return map[string]string{"ENGRAMS_URL": url, "ENGRAMS_TOKEN": "tok", "ENGRAMS_CONFIG": filepath.Join(t.TempDir(), "none")}[k]
					},
					Now: clienttest.BaseTime,
				})
				root.SetArgs(tt.args)
				if code := cli.Execute(t.Context(), root); code != tt.code {
					t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tt.code, out.String(), errw.String())
				}
				got := out.String()
				if tt.stderr {
					got = errw.String()
				}
				if tty {
					if !tt.exec {
						checkInert(t, "stdout", out.String())
					}
					checkInert(t, "stderr", errw.String())
					if !strings.Contains(got, "]52;c;ZXZpbA==") {
						t.Errorf("the text of what was sent is not shown:\n%q", got)
					}
					return
				}
				marks := hostileMarks // or JSON-escaped, with --json
				if tt.raw {
					marks = append(marks, "h\xff\xfei") // JSON on the way would have replaced them
				}
				for _, m := range marks {
					if !strings.Contains(got, m) && !strings.Contains(got, jsonEscaped(m)) {
						t.Errorf("a pipe does not get %q exactly:\n%q", m, got)
					}
				}
			})
		}
	}
}

// jsonEscaped is s as a JSON string's contents.
func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// TestExecOutputIsRaw: a command's own output reaches the terminal as it
// is, as with ssh (full-screen programs need their sequences); only the
// session's words are cleaned (TestTerminalSafety).
func TestExecOutputIsRaw(t *testing.T) {
	t.Parallel()
	url := hostileAPI(t)
	out, errw := &ttyWriter{fd: ttyFD}, &ttyWriter{fd: ttyFD}
	root := cli.NewRoot(cli.Options{
		Stdin: strings.NewReader(""), Stdout: out, Stderr: errw, IsTerminal: isTTY,
		Getenv: func(k string) string {
			return map[string]string{"ENGRAMS_URL": url, "ENGRAMS_TOKEN": "tok", "ENGRAMS_CONFIG": filepath.Join(t.TempDir(), "none")}[k]
		},
	})
	root.SetArgs([]string{"session", "exec", "s1", "--", "x"})
	_ = cli.Execute(t.Context(), root)
	if out.String() != hostile {
		t.Errorf("stdout %q, want the command's bytes %q", out.String(), hostile)
	}
	if want := "error: guest says " + cleanMarks[0]; !strings.HasPrefix(errw.String(), want) {
		t.Errorf("stderr %q, want it to start with %q", errw.String(), want)
	}
}
