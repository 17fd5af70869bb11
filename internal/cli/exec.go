package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

func isTerminal(fd int) bool { return term.IsTerminal(fd) }

// fdOf returns the file descriptor behind v, if it has one.
func fdOf(v any) (int, bool) {
	f, ok := v.(interface{ Fd() uintptr })
	if !ok {
		return -1, false
	}
	return int(f.Fd()), true
}

func (a *app) terminalFD(v any) (int, bool) {
	fd, ok := fdOf(v)
	return fd, ok && a.opts.IsTerminal(fd)
}

func (a sessionCmds) sessionExecCmd() *cobra.Command {
	var (
		interactive, tty bool
		env              []string
		workdir          string
		timeout          time.Duration
	)
	cmd := &cobra.Command{
		Use:   "exec ID [--] CMD [ARGS...]",
		Short: "Run a command in a session",
		Long: `Run a command in a session (resuming it if it is idle) and exit with the
command's exit code.

Standard input is sent to the command with -i, or whenever it is not a
terminal (so pipes work); the command's input ends when yours does. -t runs
the command under a pseudo-terminal, puts your terminal in raw mode and
forwards window size changes: use -it for an interactive shell. -t needs
standard input to be a terminal and is refused at once when it is not (a
pipe, a file, /dev/null): the end of piped input cannot reach a program
that reads a terminal, and a shell would wait for it forever. Without -t,
Ctrl-C is forwarded to the command (SIGINT, then SIGTERM, then SIGKILL).
Flags go before ID; everything after ID (or after --) is the command.

The command's output reaches your terminal as it is, as with ssh: it is the
command you chose to run, and its colours, progress bars and full-screen
programs need their control sequences (pipe it through ` + "`cat -v`" + ` to see
them). What the session itself says, such as an error, is printed without
control characters.`,
		Example: `  engrams session exec $id -- uname -a
  engrams session exec -it $id -- /bin/bash
  tar c src | engrams session exec $id -- tar x -C /work
  engrams session exec --env CI=1 --workdir /work --timeout 10m $id -- make test`,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, argv := args[0], args[1:]
			if argv[0] == "--" {
				argv = argv[1:]
			}
			if len(argv) == 0 {
				return usageError{errors.New("no command given after the session id")}
			}
			e, err := parseEnv(env)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return usageError{errors.New("--timeout must not be negative")}
			}
			if _, inTerm := a.terminalFD(cmd.InOrStdin()); tty && !inTerm {
				// The end of piped input would reach the remote terminal as a
				// ^D, which a program that reads the terminal raw (a shell's
				// line editor) may never see: it would wait forever.
				return usageError{errors.New("-t needs standard input to be a terminal, and it is not one: " +
					"drop -t to pipe it to the command (whose input then ends when yours does), or run from a terminal")}
			}
			start := apiv1.ExecStart{Argv: argv, Env: e, Dir: workdir, TimeoutMS: timeout.Milliseconds(), TTY: tty}
			return a.runExec(cmd, id, start, interactive)
		},
	}
	f := cmd.Flags()
	f.SetInterspersed(false) // flags end at ID: the command's own flags are left alone
	f.BoolVarP(&interactive, "interactive", "i", false, "send standard input to the command (default when stdin is not a terminal)")
	f.BoolVarP(&tty, "tty", "t", false, "run the command under a pseudo-terminal")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.StringVarP(&workdir, "workdir", "w", "", "working directory of the command")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long, e.g. 30s or 10m (default: none)")
	return cmd
}

func (a sessionCmds) runExec(cmd *cobra.Command, id string, start apiv1.ExecStart, interactive bool) error {
	stdin, stdout, stderr := cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	inFD, inTerm := a.terminalFD(stdin)
	c, err := a.client()
	if err != nil {
		return err
	}
	// Without a TTY, interrupts are forwarded to the command (forwardSignals
	// cancels only after the third), so the caller's signal-bound context
	// must not end the exec on the first Ctrl-C.
	parent := cmd.Context()
	if !start.TTY {
		parent = context.WithoutCancel(parent)
	}
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	outFD, outTerm := a.terminalFD(stdout)

	// The command's output is the user's own interactive stream (ssh does
	// the same): it is copied raw, to a terminal too. Only what the session
	// says about it (exit.Error below) goes through termOut.
	eio := client.ExecIO{Stdout: stdout, Stderr: stderr}
	if interactive || !inTerm {
		eio.Stdin = stdin
	}
	if start.TTY {
		start.Rows, start.Cols = 24, 80
		if outTerm {
			if w, h, err := term.GetSize(outFD); err == nil {
				start.Rows, start.Cols = uint16(h), uint16(w)
			}
		}
		if eio.Stdin != nil { // stdin is a terminal here
			old, err := term.MakeRaw(inFD)
			if err != nil {
				return fmt.Errorf("put the terminal in raw mode: %w", err)
			}
			defer func() { _ = term.Restore(inFD, old) }()
		}
		if outTerm {
			resize, stop := watchResize(ctx, outFD)
			defer stop()
			eio.Resize = resize
		}
	} else {
		signals, stop := forwardSignals(ctx, cancel)
		defer stop()
		eio.Signal = signals
	}

	exit, err := c.Sessions().ExecWSIO(ctx, id, start, eio)
	if err != nil {
		return execError(id, err)
	}
	code := exit.ExitCode
	if exit.Error != "" {
		hint := ""
		if exit.TimedOut {
			hint = "\nhint: raise --timeout, or run it in the background"
		}
		fmt.Fprintf(a.termOut(stderr), "error: %s%s\n", exit.Error, hint) // the guest's words
		if code <= 0 {
			code = 126
			if exit.TimedOut {
				code = 124
			}
		}
	}
	if code < 0 || code > 255 {
		code = 1
	}
	if code != 0 {
		return &ExitError{Code: code}
	}
	return nil
}

// execError says why an exec in session id ended without its exit
// status: what took the session from the command (a suspend), if known.
func execError(id string, err error) error {
	var cut *client.ExecCutError
	if errors.As(err, &cut) {
		return &hintError{err: fmt.Errorf("exec in session %s: %s while the command ran; its output up to then is above", id, cut.What()),
			hint: "run it again (that resumes a suspended session); `engrams session get " + id + "` shows op " + cut.OpID}
	}
	return fmt.Errorf("exec in session %s: %w", id, err)
}

// forwardSignals turns local interrupts into remote signals: SIGINT, then
// SIGTERM, then SIGKILL; a fourth interrupt cancels the command locally.
func forwardSignals(ctx context.Context, cancel context.CancelFunc) (<-chan string, func()) {
	local := make(chan os.Signal, 1)
	notifyInterrupts(local)
	out := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		escalate := []string{"SIGINT", "SIGTERM", "SIGKILL"}
		n := 0
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-local:
				name := "SIGINT"
				if isTerminate(sig) {
					name = "SIGTERM"
				}
				if n > 0 && n < len(escalate) {
					name = escalate[n]
				}
				if n >= len(escalate) {
					cancel()
					return
				}
				n++
				select {
				case out <- name:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, func() {
		stopNotify(local)
		cancel()
		<-done
	}
}
