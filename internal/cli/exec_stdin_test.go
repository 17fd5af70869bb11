package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/cli"
	"github.com/engrams/engrams/internal/clienttest"
)

// TestExecStdinNotATerminal: with standard input a pipe, a file or
// /dev/null, `session exec` never waits forever. -t is refused before
// anything is sent (on a remote PTY the end of input can be lost, and the
// fake's shell, like a real one, then waits for good); without -t the
// command's input ends when the local one does.
func TestExecStdinNotATerminal(t *testing.T) {
	t.Parallel()
	const refusal = "error: -t needs standard input to be a terminal, and it is not one: " +
		"drop -t to pipe it to the command (whose input then ends when yours does), or run from a terminal\n"
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string
		stderr string // prefix
	}{
		{name: "-it at EOF", args: []string{"-it"}, code: 2, stderr: refusal},
		{name: "-ti with input", args: []string{"-ti"}, stdin: "echo hi\n", code: 2, stderr: refusal},
		{name: "-t alone", args: []string{"-t"}, code: 2, stderr: refusal},
		{name: "-i ends with stdin", args: []string{"-i"}, stdin: "echo hi\n"},
		{name: "-i at EOF", args: []string{"-i"}},
		{name: "no flags at EOF", args: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t)
			// Today's bound on "never hangs": far above a run's few
			// milliseconds, far below the test binary's timeout.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			root := cli.NewRoot(cli.Options{
				Stdin: strings.NewReader(tt.stdin), Stdout: &out, Stderr: &errb,
				Getenv: func(k string) string {
					return map[string]string{"ENGRAMS_URL": srv.URL, "ENGRAMS_TOKEN": clienttest.Token, "ENGRAMS_CONFIG": "/nonexistent"}[k]
				},
			})
			root.SetArgs(append(append([]string{"session", "exec"}, tt.args...), "s1", "--", "sh"))
			code := cli.Execute(ctx, root)
			if ctx.Err() != nil {
				t.Fatalf("exec %v hung until the test's deadline; stdout %q, stderr %q", tt.args, out.String(), errb.String())
			}
			if code != tt.code || out.String() != tt.stdout || !strings.HasPrefix(errb.String(), tt.stderr) {
				t.Errorf("exec %v: code %d, stdout %q, stderr %q; want code %d, stdout %q, stderr starting %q",
					tt.args, code, out.String(), errb.String(), tt.code, tt.stdout, tt.stderr)
			}
			if tt.stderr == "" && errb.Len() != 0 {
				t.Errorf("unexpected stderr %q", errb.String())
			}
		})
	}
}
