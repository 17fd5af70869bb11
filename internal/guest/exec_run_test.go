package guest

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

// TestExecRun drives the plain-HTTP exec: NDJSON frames, exit codes,
// stdin, timeouts, bad input; and the connection stays reusable.
func TestExecRun(t *testing.T) {
	t.Parallel()
	srv := New(Config{WorkDir: t.TempDir(), Env: os.Environ(), StateDir: t.TempDir()}, Deps{})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	tests := []struct {
		name       string
		req        guestapi.ExecRequest
		status     int
		wantOut    string
		wantErrOut string
		wantCode   int
		wantErr    string
		timedOut   bool
	}{
		{name: "exit code and both streams", req: guestapi.ExecRequest{Argv: []string{"sh", "-c", "echo hi; echo oops >&2; exit 3"}},
			status: 200, wantOut: "hi\n", wantErrOut: "oops\n", wantCode: 3},
		{name: "stdin", req: guestapi.ExecRequest{Argv: []string{"tr", "a-z", "A-Z"}, Stdin: []byte("piped\n")}, status: 200, wantOut: "PIPED\n"},
		{name: "env and dir", req: guestapi.ExecRequest{Argv: []string{"sh", "-c", "echo $X; pwd"}, Env: map[string]string{"X": "y"}, Dir: "/"},
			status: 200, wantOut: "y\n/\n"},
		{name: "timeout", req: guestapi.ExecRequest{Argv: []string{"sleep", "5"}, TimeoutMS: 100}, status: 200, wantCode: 137, wantErr: "timed out", timedOut: true},
		{name: "no such command", req: guestapi.ExecRequest{Argv: []string{"no-such-cmd-xyz"}}, status: 200, wantCode: -1, wantErr: "no-such-cmd-xyz"},
		{name: "empty argv", req: guestapi.ExecRequest{}, status: 400},
		{name: "relative dir", req: guestapi.ExecRequest{Argv: []string{"true"}, Dir: "tmp"}, status: 400},
	}
	client := ts.Client()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, _ := json.Marshal(tt.req)
			resp, err := client.Post(ts.URL+guestapi.PathExecRun, "application/json", strings.NewReader(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.status != http.StatusOK {
				return
			}
			var out, errOut strings.Builder
			var exit *guestapi.StreamFrame
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				var f guestapi.StreamFrame
				if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
					t.Fatalf("bad frame %q: %v", sc.Text(), err)
				}
				switch f.Type {
				case "stdout":
					out.Write(f.Data)
				case "stderr":
					errOut.Write(f.Data)
				case "exit":
					if exit != nil {
						t.Fatal("two exit frames")
					}
					exit = &f
				}
			}
			if exit == nil {
				t.Fatal("no exit frame")
			}
			if out.String() != tt.wantOut || errOut.String() != tt.wantErrOut || exit.ExitCode != tt.wantCode ||
				!strings.Contains(exit.Error, tt.wantErr) || exit.TimedOut != tt.timedOut {
				t.Fatalf("got out %q err %q exit %+v", out.String(), errOut.String(), *exit)
			}
		})
	}
}
