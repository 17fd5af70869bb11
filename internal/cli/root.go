package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// Options are what NewRoot needs from its surroundings; every
// field has a default, so the zero value suits the real binary.
type Options struct {
	// HostAgent, when set, is added as `engrams host run` (the host agent
	// command lives in cmd/engrams).
	HostAgent *cobra.Command
	// Version is the client's version shown by `engrams version` (default:
	// the main module's version from the build info).
	Version string

	Stdin          io.Reader           // default os.Stdin
	Stdout, Stderr io.Writer           // default os.Stdout, os.Stderr
	Getenv         func(string) string // default os.Getenv
	Now            func() time.Time    // default time.Now
	Location       *time.Location      // times are shown in it; default time.Local
	HTTPClient     *http.Client        // default a plain client
	// IsTerminal reports whether fd is a terminal (default golang.org/x/term).
	IsTerminal func(fd int) bool
	// PollInterval is how often commands that wait poll the server
	// (`image enable`, `image refresh`); default 1s.
	PollInterval time.Duration
}

// app is the state every command shares: the options, the global flags
// and what is resolved from them (the API client, times as shown).
type app struct {
	opts    Options
	url     string
	token   string
	jsonOut bool
}

// The command groups. Each embeds the shared *app, so its methods (receiver
// a, as app's) read a.opts, a.jsonOut, a.client() and the output helpers.
type (
	sessionCmds struct{ *app } // engrams session: session.go, snapshot.go, exec.go
	imageCmds   struct{ *app } // engrams image: image.go, image_progress.go
	taskCmds    struct{ *app } // engrams task: task.go
	hostCmds    struct{ *app } // engrams host: host.go
	tokenCmds   struct{ *app } // engrams token: token.go
	profileCmds struct{ *app } // engrams profile: profile.go
	harnessCmds struct{ *app } // engrams harness: harness.go
	secretCmds  struct{ *app } // engrams secret: secret.go
	autoCmds    struct{ *app } // engrams automation: automation.go
)

// NewRoot returns the `engrams` command with extra commands added at the
// top level (e.g. `server`, `dev`) and opts.HostAgent, if set, as
// `engrams host run`. Run it with Execute to get the process exit code.
func NewRoot(opts Options, extra ...*cobra.Command) *cobra.Command {
	a := &app{opts: withDefaults(opts)}
	root := &cobra.Command{
		Use:   "engrams",
		Short: "Run AI coding agents in isolated microVMs",
		Long: `engrams runs AI coding agents in isolated microVMs on machines you own.

This CLI talks to an engrams coordinator over its REST API. It finds the
coordinator and your token from, in order: the --url/--token flags, the
ENGRAMS_URL/ENGRAMS_TOKEN environment variables, and the config file that
` + "`engrams dev`" + ` writes ($ENGRAMS_CONFIG, or engrams/config.json in your user
config directory).`,
		Example: `  engrams dev                              # start everything locally
  id=$(engrams session create)
  engrams session exec $id -- uname -a
  engrams session exec -it $id -- /bin/sh
  engrams session logs --follow $id
  engrams session suspend $id              # free its host; it resumes when used
  engrams session delete $id`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          subcommandArgs,
		RunE:          func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	if _, tty := a.terminalFD(a.opts.Stderr); tty {
		root.Annotations = map[string]string{annStderrTerminal: "true"} // for Execute
	}
	root.SetIn(a.opts.Stdin)
	root.SetOut(a.opts.Stdout)
	root.SetErr(a.opts.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "coordinator URL, e.g. http://127.0.0.1:7700 (env ENGRAMS_URL)")
	pf.StringVar(&a.token, "token", "", "API token (env ENGRAMS_TOKEN)")
	pf.BoolVar(&a.jsonOut, "json", false, `print JSON instead of text (a list prints {"items": [...], "next_cursor": ""})`)

	host := hostCmds{a}.hostCmd()
	if opts.HostAgent != nil {
		_, rest, _ := strings.Cut(opts.HostAgent.Use, " ")
		opts.HostAgent.Use = strings.TrimSpace("run " + rest)
		host.AddCommand(opts.HostAgent)
	}
	root.AddCommand(sessionCmds{a}.sessionCmd(), imageCmds{a}.imageCmd(), taskCmds{a}.taskCmd(), host, tokenCmds{a}.tokenCmd(), a.versionCmd())
	root.AddCommand(profileCmds{a}.profileCmd(), harnessCmds{a}.harnessCmd(), secretCmds{a}.secretCmd(), autoCmds{a}.automationCmd(), autoCmds{a}.integrationCmd())
	pc := peopleCmds{a}
	root.AddCommand(pc.whoAmICmd(), pc.memberCmd(), pc.identityCmd(), pc.auditCmd(), loginCmds{a}.loginCmd())
	root.AddCommand(extra...)
	a.addCompletions(root)
	return root
}

func withDefaults(o Options) Options {
	if o.Stdin == nil {
		o.Stdin = os.Stdin
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.IsTerminal == nil {
		o.IsTerminal = isTerminal
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.Version == "" {
		bi, _ := debug.ReadBuildInfo()
		o.Version = buildVersion(bi)
	}
	return o
}

// buildVersion says which build this binary is: its module version, else
// "(devel)", with the commit it was built from (and whether the tree had
// changes), the commit's time and the Go version.
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "(devel)"
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	// A module version (a tag, or Go's pseudo-version of the commit) says
	// which commit already.
	if rev := set["vcs.revision"]; rev != "" && v == "(devel)" {
		v += " commit " + rev[:min(12, len(rev))]
		if set["vcs.modified"] == "true" {
			v += "+changes"
		}
	}
	if t := set["vcs.time"]; t != "" && strings.HasPrefix(v, "(devel)") {
		v += " of " + t
	}
	if bi.GoVersion != "" {
		v += ", " + bi.GoVersion
	}
	return v
}

// client resolves the URL and token (flags, then env, then the config
// file) and returns an API client.
func (a *app) client() (*client.Client, error) {
	url := firstNonEmpty(a.url, a.opts.Getenv("ENGRAMS_URL"))
	token := firstNonEmpty(a.token, a.opts.Getenv("ENGRAMS_TOKEN"))
	if url == "" || token == "" {
		cfg, err := readClientConfig(a.opts.Getenv)
		if err != nil {
			return nil, err
		}
		url, token = firstNonEmpty(url, cfg.URL), firstNonEmpty(token, cfg.Token)
	}
	return client.New(url, token, client.WithHTTPClient(a.opts.HTTPClient), client.WithUserAgent("engrams-cli/"+a.opts.Version)), nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

// ExitError ends the process with Code without printing anything (e.g. the
// remote exit code of `session exec`).
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// hintError is an error that knows its own hint.
type hintError struct {
	err  error
	hint string
}

func (e *hintError) Error() string { return e.err.Error() }
func (e *hintError) Unwrap() error { return e.err }

// usageArgs marks an argument validator's errors as usage errors.
func usageArgs(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// Execute runs root (with os.Args, or what root.SetArgs set) and returns
// the process exit code: 0, the code of an *ExitError, 2 for usage errors,
// 1 for other errors. Errors are printed to root's error stream as
// "error: ..." plus a "hint: ..." line saying what to do next.
func Execute(ctx context.Context, root *cobra.Command) int {
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	var exit *ExitError
	if errors.As(err, &exit) {
		return exit.Code
	}
	if cmd == nil {
		cmd = root
	}
	code := 1
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		code = 2
	}
	w := root.ErrOrStderr()
	msg := sayOnce(strings.TrimSpace(err.Error()))
	if root.Annotations[annStderrTerminal] == "true" {
		msg = cleanText(msg) // errors quote what guests, images and hosts said
	}
	fmt.Fprintf(w, "error: %s\n", msg)
	if s := flagSuggestion(cmd, err); s != "" {
		fmt.Fprintf(w, "hint: %s\n", s)
	}
	if hint := hintFor(cmd, err, code == 2); hint != "" {
		fmt.Fprintf(w, "hint: %s\n", hint)
	}
	return code
}

// sayOnce drops a part of an error message that repeats the part before
// it: the CLI names what it was doing and the server may have said the
// same ("get session X: get session X: not found" reads "get session X: not
// found").
func sayOnce(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:1]
	for _, p := range parts[1:] {
		if p != out[len(out)-1] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}

// isCobraUsageError recognises the errors cobra makes before a command runs.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// Annotations a command sets for hintFor (inherited from parents).
const (
	annNotFound = "engrams.hint.not_found"
	annConflict = "engrams.hint.conflict"
	// annStderrTerminal, on the root, says its error stream is a terminal.
	annStderrTerminal = "engrams.stderr_terminal"
)

func annotation(cmd *cobra.Command, key string) string {
	for c := cmd; c != nil; c = c.Parent() {
		if v := c.Annotations[key]; v != "" {
			return v
		}
	}
	return ""
}

// hintFor says what to do next about err from cmd.
func hintFor(cmd *cobra.Command, err error, usage bool) string {
	var unreachable *client.UnreachableError
	var failed *client.ExecFailedError
	var hinted *hintError
	switch {
	case usage:
		return fmt.Sprintf("see `%s --help`", cmd.CommandPath())
	case errors.As(err, &hinted):
		return hinted.hint
	case errors.As(err, &unreachable):
		return "" // its message says what to do
	case errors.As(err, &failed) && failed.TimedOut:
		return "raise --timeout, or run it in the background"
	case client.IsUnauthorized(err):
		return "create a token with `engrams token create` or run `engrams dev`, then pass it with --token or ENGRAMS_TOKEN"
	case client.IsNotFound(err):
		return annotation(cmd, annNotFound)
	case client.IsConflict(err):
		return annotation(cmd, annConflict)
	case client.HasCode(err, client.CodeNoCapacity):
		wait, _ := client.NoCapacity(err)
		return fmt.Sprintf("no host has room; retry after %d s (idle sessions are suspended to make room once idle long enough; `engrams host list` shows each host's load)",
			max(int(wait.Seconds()), 1))
	case client.IsUnavailable(err):
		return "the coordinator or its hosts are busy or unreachable: check `engrams host list` and retry"
	case client.HasCode(err, client.CodeTimeout):
		return "the server stopped waiting but the operation goes on; check it with `engrams session get ID`"
	case client.HasCode(err, client.CodeTooLarge):
		return "send less data at once"
	case errors.Is(err, client.ErrNoExit):
		return "the connection or the VM was lost; check it with `engrams session get ID`"
	}
	return ""
}

// group returns a command that only holds subcommands.
func group(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  subcommandArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's and the server's versions",
		Long: `Print this CLI's version and the coordinator's: its build, the host link
protocol and guest API versions, and the replica that answered.`,
		Example: `  engrams version
  engrams version --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			v, verr := c.Version(cmd.Context())
			if a.jsonOut {
				out := struct {
					Client string         `json:"client"`
					Server *apiv1.Version `json:"server,omitempty"`
				}{Client: a.opts.Version}
				if verr == nil {
					out.Server = &v
				}
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "client: %s\n", a.opts.Version)
				if verr == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "server: %s (host link protocol %d, guest API %d, replica %s)\n",
						v.Version, v.HostlinkProtocol, v.GuestAPI, v.ReplicaID)
				}
			}
			if verr != nil {
				return fmt.Errorf("get server version: %w", verr)
			}
			return nil
		},
	}
}
