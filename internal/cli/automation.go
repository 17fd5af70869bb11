package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
)

func (a autoCmds) automationCmd() *cobra.Command {
	cmd := group("automation", "Automate repeat work: a trigger, typed inputs and a tree of blocks",
		`An automation is one trigger (manual, a cron schedule, a signed webhook, a
Slack mention, a GitHub pull request, a Linear issue), typed inputs and a
tree of blocks (start a task, send a prompt, wait for the agent, run a
command, read or write a file, conditions, bounded loops, posts). Its
definition is JSON or YAML, checked when saved; each save is a new version,
and a run finishes on the version it started with. Each run is durable: it
survives a coordinator restart, and every block is a recorded step.

A definition, nightly.yaml (profile web must exist: engrams profile list):

`+nightlyExample+`
Triggers: manual; schedule (cron, time_zone); webhook (slug: POST
/v1/hooks/SLUG, signed, see `+"`engrams automation get --help`"+`); slack_mention
(channels); github_pr (repos, events, min_author); linear_issue (labels).
Blocks: start_task, send_prompt, wait_idle, run_command, read_file,
write_file, condition, loop, post_slack, github_comment, github_review,
github_file, open_pr, linear_comment, end_session. Templates:
{{inputs.NAME}}, {{trigger.PATH}}, {{steps.ID.output}}; a run_command's
command takes none (pass values in its env).`)
	cmd.Example = `  engrams automation create nightly.yaml --enable
  engrams automation run nightly --input area=docs --wait
  engrams automation runs nightly`
	cmd.Aliases = []string{"automations", "auto"}
	cmd.Annotations = map[string]string{
		annNotFound: "list automations with `engrams automation list`",
		annConflict: "the automation changed or its name or slug is taken: check it with `engrams automation get NAME`",
	}
	cmd.AddCommand(a.createCmd(), a.listCmd(), a.getCmd(), a.editCmd(), a.enableCmd(true), a.enableCmd(false), a.deleteCmd(),
		a.rotateCmd(), a.runCmd(), a.runsCmd(), a.runShowCmd(), a.cancelCmd())
	return cmd
}

// nightlyExample is the definition `automation --help` shows (a test
// saves it).
const nightlyExample = `  name: nightly
  trigger: {kind: schedule, cron: "0 2 * * *", time_zone: Europe/Berlin}
  inputs:
    - {name: area, type: string, default: tests}
  blocks:
    - {id: task, kind: start_task, profile: web, prompt: "Fix the flakiest of our {{inputs.area}}."}
    - {id: idle, kind: wait_idle, task: task, timeout: 1h}
    - {id: check, kind: run_command, task: task, command: make test}
    - {id: stop, kind: end_session, task: task}
`

// readDefinition reads a definition file (- for stdin), bounded.
func readDefinition(cmd *cobra.Command, file string) (string, error) {
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return "", usageError{fmt.Errorf("read the definition: %w", err)}
	}
	return string(data), nil
}

// printSaved says what was saved and shows a new hook secret, once.
func (a autoCmds) printSaved(cmd *cobra.Command, base, verb string, r apiv1.AutomationResponse) error {
	if a.jsonOut {
		return printJSON(cmd.OutOrStdout(), r)
	}
	w := cmd.OutOrStdout()
	state := "disabled"
	if r.Enabled {
		state = "enabled"
	}
	fmt.Fprintf(w, "%s automation %s (version %d, %s trigger, %s)\n", verb, r.Name, r.Version, r.Trigger, state)
	if r.HookURL != "" {
		fmt.Fprintf(w, "webhook: POST %s%s\n", base, r.HookURL)
	}
	if r.HookSecret != "" {
		fmt.Fprintf(w, "secret:  %s\n(shown this once: sign each delivery with it, see `engrams automation get --help`)\n", r.HookSecret)
	}
	return nil
}

func (a autoCmds) createCmd() *cobra.Command {
	var enable bool
	cmd := &cobra.Command{
		Use:   "create FILE [--enable]",
		Short: "Save a definition (JSON or YAML) as a new automation",
		Long: `Save a new automation from FILE (- for stdin), JSON or YAML. The server
checks it whole and names each problem with its place (blocks[2].prompt:
...): unknown blocks, references to blocks that have not run, unknown
inputs in templates, bad cron schedules or time zones, limits. It starts
disabled unless --enable: a disabled automation runs only by hand. A
webhook trigger gets its signing secret, printed this once.`,
		Example: `  engrams automation create nightly.yaml --enable
  cat review.json | engrams automation create -`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			def, err := readDefinition(cmd, args[0])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Automations().Create(cmd.Context(), apiv1.CreateAutomationRequest{Definition: def, Enabled: enable})
			if err != nil {
				return fmt.Errorf("create automation: %w", err)
			}
			return a.printSaved(cmd, c.BaseURL(), "created", r)
		},
	}
	cmd.Flags().BoolVar(&enable, "enable", false, "enable its trigger at once")
	return cmd
}

func (a autoCmds) listCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List automations",
		Long:    "List automations by name with their trigger kind, whether the trigger is on, the current version and when it changed.",
		Example: `  engrams automation list
  engrams automation list --json | jq -r '.items[].name'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			as, err := c.Automations().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list automations: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), as, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "NAME", "TRIGGER", "ENABLED", "VERSION", "UPDATED")
			for _, x := range as {
				row(tw, x.Name, x.Trigger, x.Enabled, x.Version, a.whenAgo(x.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a autoCmds) getCmd() *cobra.Command {
	var defOnly bool
	cmd := &cobra.Command{
		Use:     "get NAME",
		Aliases: []string{"show"},
		Short:   "Show an automation and its definition",
		Long: `Show an automation: its state, version, trigger and current definition.
--definition prints only the definition, to edit and save again.

A webhook trigger takes POST /v1/hooks/SLUG with three headers:
  X-Engrams-Timestamp  the Unix time in seconds (within 5 minutes of the server's)
  X-Engrams-Signature  v1= and the hex HMAC-SHA256 of "TIMESTAMP.BODY" keyed by the secret
  X-Engrams-Delivery   optional, an id for logs
The key is the whole secret, whsec_ included. A delivery is known by its
timestamp and body: sent again, it starts nothing. The body is a JSON
object: the trigger payload ({{trigger.PATH}}), its "inputs" object the
run's inputs. README.md shows the signature made with openssl and curl.`,
		Example: `  engrams automation get nightly
  engrams automation get nightly --definition > nightly.json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			x, err := c.Automations().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get automation %s: %w", args[0], err)
			}
			if defOnly {
				return printJSON(cmd.OutOrStdout(), x.Definition)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), x)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "automation %s (%s)\nversion:  %d\ntrigger:  %s\nenabled:  %t\nupdated:  %s\n", x.Name, x.ID, x.Version, x.Trigger,
				x.Enabled, a.whenAgo(x.UpdatedAt))
			if x.HookURL != "" {
				fmt.Fprintf(w, "webhook:  POST %s%s\n", c.BaseURL(), x.HookURL)
			}
			fmt.Fprintln(w, "definition:")
			return printJSON(w, x.Definition)
		},
	}
	cmd.Flags().BoolVar(&defOnly, "definition", false, "print only the definition")
	return cmd
}

func (a autoCmds) editCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "edit NAME [FILE]",
		Short: "Save a new version of an automation (from FILE, or in $EDITOR)",
		Long: `Save a new version of an automation: from FILE (- for stdin), or, without
FILE, by editing the current definition in $EDITOR. Runs already started
finish on their version. If someone else saved it in between, nothing is
changed and the command says so.`,
		Example: `  engrams automation edit nightly nightly.yaml
  EDITOR=vi engrams automation edit nightly`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			cur, err := c.Automations().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("edit automation %s: %w", args[0], err)
			}
			var def string
			if len(args) == 2 {
				def, err = readDefinition(cmd, args[1])
			} else {
				def, err = editInEditor(cmd, cur.Definition)
			}
			if err != nil {
				return err
			}
			r, err := c.Automations().Update(cmd.Context(), cur.ID, apiv1.UpdateAutomationRequest{Definition: def, Version: cur.Version})
			if err != nil {
				return fmt.Errorf("edit automation %s: %w", args[0], err)
			}
			return a.printSaved(cmd, c.BaseURL(), "updated", r)
		},
	}
}

// editInEditor opens the definition, indented, in $VISUAL or $EDITOR and
// returns what was saved.
func editInEditor(cmd *cobra.Command, def json.RawMessage) (string, error) {
	editor := firstNonEmpty(os.Getenv("VISUAL"), os.Getenv("EDITOR"))
	if editor == "" {
		return "", usageError{errors.New("give FILE, or set $EDITOR to edit the definition in place")}
	}
	f, err := os.CreateTemp("", "automation-*.json")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if err := printJSON(f, def); err != nil {
		f.Close()
		return "", err
	}
	f.Close()
	parts := strings.Fields(editor)
	ed := exec.CommandContext(cmd.Context(), parts[0], append(parts[1:], filepath.Clean(f.Name()))...)
	ed.Stdin, ed.Stdout, ed.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
	if err := ed.Run(); err != nil {
		return "", fmt.Errorf("run %s: %w", parts[0], err)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func (a autoCmds) enableCmd(on bool) *cobra.Command {
	use, short := "disable NAME", "Turn an automation's trigger off (it still runs by hand)"
	if on {
		use, short = "enable NAME", "Turn an automation's trigger on"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `. A disabled automation's schedule does not fire and its webhook,
Slack, GitHub and Linear deliveries are refused; it still runs by hand
(engrams automation run).`,
		Example: "  engrams automation " + strings.Fields(use)[0] + " nightly",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			x, err := c.Automations().SetEnabled(cmd.Context(), args[0], on)
			if err != nil {
				return fmt.Errorf("%s automation %s: %w", strings.Fields(use)[0], args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), x)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "automation %s: enabled=%t\n", x.Name, x.Enabled)
			return nil
		},
	}
}

func (a autoCmds) deleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete an automation, its versions and its runs (running ones are cancelled)",
		Long: `Delete an automation with every version and run. Runs that have not ended are
cancelled first; tasks they started keep running until stopped.`,
		Example: "  engrams automation delete nightly",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			x, err := c.Automations().Delete(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("delete automation %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), x)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted automation %s\n", x.Name)
			return nil
		},
	}
}

func (a autoCmds) rotateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rotate-secret NAME",
		Short: "Give a webhook automation a new signing secret (the old one stops working)",
		Long: `Make a new signing secret for a webhook automation and print it, this once.
Deliveries signed with the old secret are refused from now on; a sender may
put both signatures, comma separated, in X-Engrams-Signature while it moves.`,
		Example: "  engrams automation rotate-secret deploy",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Automations().RotateHookSecret(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("rotate the secret of automation %s: %w", args[0], err)
			}
			return a.printSaved(cmd, c.BaseURL(), "rotated the secret of", r)
		},
	}
}

// parseInputs reads --input NAME=VALUE values: VALUE as JSON when it is
// JSON (42, true, {"a":1}), else as a string.
func parseInputs(vals []string) (map[string]any, error) {
	out := map[string]any{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--input %q: want NAME=VALUE", v)}
		}
		var j any
		if json.Unmarshal([]byte(val), &j) == nil {
			out[k] = j
		} else {
			out[k] = val
		}
	}
	return out, nil
}

func (a autoCmds) runCmd() *cobra.Command {
	var inputs []string
	var payload string
	var wait bool
	cmd := &cobra.Command{
		Use:   "run NAME [--input NAME=VALUE]... [--payload FILE] [--wait]",
		Short: "Start a run by hand, with inputs (and a sample trigger payload to test with)",
		Long: `Start a run of an automation's current version, enabled or not. Inputs are
checked against its input types (missing required ones are named).
--payload FILE gives a trigger payload to test a definition with, e.g. a
sample webhook body. --wait follows the run until it ends, printing each
step as it finishes, and exits 1 unless it succeeded.`,
		Example: `  engrams automation run nightly
  engrams automation run review --input pr=42 --input strict=true --wait
  engrams automation run deploy --payload sample.json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := parseInputs(inputs)
			if err != nil {
				return err
			}
			req := apiv1.StartRunRequest{Inputs: in}
			if payload != "" {
				raw, err := readDefinition(cmd, payload)
				if err != nil {
					return err
				}
				req.Trigger = json.RawMessage(raw)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Automations().Run(cmd.Context(), args[0], req)
			if err != nil {
				return fmt.Errorf("run automation %s: %w", args[0], err)
			}
			if !wait {
				if a.jsonOut {
					return printJSON(cmd.OutOrStdout(), r)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "run %s %s (engrams automation run-show %s)\n", r.ID, r.State, r.ID)
				return nil
			}
			return a.follow(cmd, r.ID)
		},
	}
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "an input `NAME=VALUE` (repeatable; VALUE is JSON if it parses, else a string)")
	cmd.Flags().StringVar(&payload, "payload", "", "a trigger payload `FILE` (a JSON object; - for stdin)")
	cmd.Flags().BoolVar(&wait, "wait", false, "follow the run until it ends")
	return cmd
}

// follow prints a run's steps as they finish until it ends.
func (a autoCmds) follow(cmd *cobra.Command, id string) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	shown := map[int64]bool{}
	for {
		d, err := c.Automations().GetRun(cmd.Context(), id)
		if err != nil {
			return fmt.Errorf("follow run %s: %w", id, err)
		}
		for _, s := range d.Steps {
			if s.EndedAt != nil && !shown[s.Seq] && !a.jsonOut {
				shown[s.Seq] = true
				fmt.Fprintf(w, "%3d  %-9s %-28s %6s  %s\n", s.Seq, s.State, s.Path+" "+s.Block, time.Duration(s.DurationMS)*time.Millisecond,
					clipLine(firstNonEmpty(s.Error, s.Output), 80))
			}
		}
		if terminalRun(d.State) {
			if a.jsonOut {
				_ = printJSON(w, d)
			} else {
				fmt.Fprintf(w, "run %s %s %s\n", d.ID, d.State, d.Error)
			}
			if d.State != apiv1.RunSucceeded {
				return &ExitError{Code: 1}
			}
			return nil
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func terminalRun(state string) bool {
	switch state {
	case apiv1.RunSucceeded, apiv1.RunFailed, apiv1.RunCancelled, apiv1.RunSuperseded, apiv1.RunSkipped, apiv1.RunRefused:
		return true
	}
	return false
}

// clipLine is s on one line, cut to max runes.
func clipLine(s string, max int) string { return cut(strings.Join(strings.Fields(s), " "), max) }

func (a autoCmds) runsCmd() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "runs NAME",
		Short: "List an automation's runs, newest first",
		Long: `List an automation's runs, newest first: state, what started it, the
version it ran, when, how long it took and why it failed.`,
		Example: `  engrams automation runs nightly
  engrams automation runs nightly --limit 0 --json | jq -r '.items[] | select(.state=="failed") | .id'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			runs, next, err := c.Automations().Runs(cmd.Context(), args[0], limit)
			if err != nil {
				return fmt.Errorf("list runs of %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), runs, next)
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "RUN", "STATE", "TRIGGER", "VERSION", "CREATED", "TOOK", "ERROR")
			for _, r := range runs {
				took := ""
				if r.StartedAt != nil && r.EndedAt != nil {
					took = r.EndedAt.Sub(*r.StartedAt).Round(time.Millisecond).String()
				}
				row(tw, r.ID, r.State, r.Trigger, r.Version, a.whenAgo(r.CreatedAt), took, clipLine(r.Error, 60))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "show at most `N` runs (0: all)")
	return cmd
}

func (a autoCmds) runShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "run-show RUN",
		Aliases: []string{"run-get"},
		Short:   "Show a run and its step timeline",
		Example: `  engrams automation run-show 01a2383a-ccec-7a90-be4a-20c6f8d9d487
  engrams automation run-show RUN --json | jq '.steps[] | {path, attempt, duration_ms}'`,
		Long: `Show a run: state, trigger, inputs and each recorded step with its place in
the definition, attempt, duration and output or error. A block that ran
when its coordinator died runs again when another takes over: its attempt
says so.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			d, err := c.Automations().GetRun(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("show run %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), d)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "run %s of %s (version %d)\nstate:    %s %s\ntrigger:  %s %s\ninputs:   %s\ncreated:  %s\n\n", d.ID, d.Automation,
				d.Version, d.State, d.Error, d.Trigger, short(d.Payload, 80), short(d.Inputs, 80), a.whenAgo(d.CreatedAt))
			tw := newTable(w)
			row(tw, "SEQ", "STEP", "BLOCK", "KIND", "STATE", "ATTEMPT", "TOOK", "OUTPUT / ERROR")
			for _, s := range d.Steps {
				row(tw, s.Seq, s.Path, s.Block, s.Kind, s.State, s.Attempt, time.Duration(s.DurationMS)*time.Millisecond,
					clipLine(firstNonEmpty(s.Error, s.Output), 60))
			}
			return tw.Flush()
		},
	}
}

func (a autoCmds) cancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run that has not ended",
		Long: `Cancel a run that has not ended: its block in progress is interrupted and no
further block runs. Tasks it started keep running until stopped.`,
		Example: "  engrams automation cancel 01a2383a-ccec-7a90-be4a-20c6f8d9d487",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Automations().CancelRun(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("cancel run %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %s %s\n", r.ID, r.State)
			return nil
		},
	}
}
