package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

func (a taskCmds) taskCmd() *cobra.Command {
	cmd := group("task", "Start agents on prompts, follow their conversation, see what they changed",
		`A task is one agent's work: a profile (image, harness, model, repositories,
credentials) and a prompt. It runs in a session of its own; its conversation
is kept by the coordinator and continues across the session's suspends and
resumes: `+"`engrams task send`"+` resumes a suspended session transparently.`)
	cmd.Aliases = []string{"tasks", "t"}
	cmd.Annotations = map[string]string{
		annNotFound: "list tasks with `engrams task list`",
		annConflict: "the task is not in a state that allows this; check it with `engrams task get ID`",
	}
	cmd.AddCommand(a.taskStartCmd(), a.taskListCmd(), a.taskShowCmd(), a.taskSendCmd(), a.taskDiffCmd(),
		a.taskStopCmd(), a.taskFilesCmd(), a.taskPRCmd())
	return cmd
}

func (a taskCmds) taskStartCmd() *cobra.Command {
	var (
		req    apiv1.StartTaskRequest
		follow bool
	)
	cmd := &cobra.Command{
		Use:   "start --profile P PROMPT",
		Short: "Start an agent on a prompt and print the task's id",
		Long: `Start a task: a session is created from the profile (its image, with the
profile's harness bundle attached), the profile's repositories are cloned
into /work, and the prompt goes to the agent. The command prints the task id
at once (and, on stderr, which backends enforce the profile's egress and the
hosts the task reaches); --follow streams the conversation until the agent
is done with the prompt. A task is yours: other members see it (and its
sessions) only with --share; your organisation's admins always do.`,
		Example: `  engrams task start --profile go-service "add a /healthz endpoint"
  engrams task start -p docs --follow "fix the typos in README.md"
  engrams task start -p go-service --share "reproduce the flaky test"`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Prompt = args[0]
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.Tasks().Start(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("start task: %w", err)
			}
			if a.jsonOut && !follow {
				return printJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.ID)
			if t.Receipt != nil {
				printGrants(cmd.ErrOrStderr(), *t.Receipt, req.Profile)
			}
			if !follow {
				return nil
			}
			return a.followTask(cmd, c, t.ID, 0, t.EventSeq)
		},
	}
	cmd.Annotations = map[string]string{annNotFound: "list profiles with `engrams profile list`"}
	cmd.Flags().StringVarP(&req.Profile, "profile", "p", "", "profile to start from (required)")
	cmd.Flags().StringVar(&req.Title, "title", "", "title shown in task list (default: the prompt's first line)")
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the conversation until the agent is done with the prompt")
	cmd.Flags().BoolVar(&req.Shared, "share", false, "show the task to every member of the organisation (default: private)")
	_ = cmd.MarkFlagRequired("profile")
	return cmd
}

func (a taskCmds) taskListCmd() *cobra.Command {
	var profile, state string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, oldest first",
		Long: `List tasks, oldest first: id, state (starting, running, idle, stopped,
failed), title, current session, what its model usage cost so far and when
it last changed. --profile and --state narrow the list; --json prints every
field (usage.cost.micros is the exact cost in millionths of its currency).`,
		Example: `  engrams task list
  engrams task list --state running,idle
  engrams task list --profile go-service --json`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ts, err := c.Tasks().List(cmd.Context(), profile, state)
			if err != nil {
				return fmt.Errorf("list tasks: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ts, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "ID", "STATE", "TITLE", "SESSION", "COST", "UPDATED")
			for _, t := range ts {
				row(tw, t.ID, t.State, cut(t.Title, 50), t.SessionID, taskCost(t.Usage), a.ago(t.UpdatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "", "only tasks of this profile")
	cmd.Flags().StringVar(&state, "state", "", "only tasks in these states (comma-separated: starting,running,idle,stopped,failed)")
	return cmd
}

func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func (a taskCmds) taskShowCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"show"},
		Short:   "Show a task and its conversation",
		Example: `  engrams task get 0193f2a1-...
  engrams task get 0193f2a1-... --follow
  engrams task get 0193f2a1-... --json | jq '.events[] | select(.type=="tool_call")'`,
		Long: `Show a task: its state, session, profile, model, who started it, when,
the tokens it used and what they cost, and the conversation so far
(prompts, the agent's text, tool calls and results, files changed, each
turn's usage, errors).
--follow keeps streaming until the agent is done with the latest prompt.
--json prints the task and its events as JSON; with --follow, the events
as they come, one JSON object a line.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.Tasks().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("show task: %w", err)
			}
			if a.jsonOut && follow {
				return a.followTask(cmd, c, t.ID, 0, t.EventSeq)
			}
			if a.jsonOut {
				var evs []apiv1.TaskEvent
				if err := c.Tasks().Events(cmd.Context(), t.ID, 0, false, func(e apiv1.TaskEvent) error {
					evs = append(evs, e)
					return nil
				}); err != nil {
					return fmt.Errorf("read task events: %w", err)
				}
				return printJSON(a.termOut(cmd.OutOrStdout()), struct {
					apiv1.Task
					Events []apiv1.TaskEvent `json:"events"`
				}{t, evs})
			}
			w := a.termOut(cmd.OutOrStdout())
			a.printTaskHeader(cmd.Context(), w, c, t)
			if follow {
				return a.followTask(cmd, c, t.ID, 0, t.EventSeq)
			}
			return c.Tasks().Events(cmd.Context(), t.ID, 0, false, func(e apiv1.TaskEvent) error {
				printTaskEvent(w, e)
				return nil
			})
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the conversation until the agent is done with the latest prompt")
	return cmd
}

// followTask prints a task's events from after until the agent finished
// the latest prompt: every prompt printed was answered by an idle event of
// its turn (an idle of an earlier turn answers none of them) and the events
// through seq through (the task's last when following began) were printed;
// or until the task stopped or failed.
func (a taskCmds) followTask(cmd *cobra.Command, c *client.Client, id string, after, through int64) error {
	w := a.termOut(cmd.OutOrStdout())
	prompts, pending := 0, map[string]bool{} // turns of prompts not yet answered
	return c.Tasks().Events(cmd.Context(), id, after, true, func(e apiv1.TaskEvent) error {
		if a.jsonOut {
			if err := json.NewEncoder(w).Encode(e); err != nil {
				return err
			}
		} else {
			printTaskEvent(w, e)
		}
		switch e.Type {
		case "prompt":
			prompts++
			pending[eventTurn(e)] = true
		case "error":
			var d struct {
				Kind string `json:"kind"`
			}
			if json.Unmarshal(e.Data, &d) == nil && d.Kind == "not_delivered" { // that prompt will get no answer
				delete(pending, eventTurn(e))
			}
		case "idle":
			if turn := eventTurn(e); turn != "" {
				delete(pending, turn)
			} else {
				clear(pending)
			}
		case "stopped", "setup_failed":
			return client.ErrStopFollowing
		}
		if prompts > 0 && len(pending) == 0 && e.Seq >= through {
			return client.ErrStopFollowing
		}
		return nil
	})
}

// eventTurn is the turn a task event belongs to ("" when it names none).
func eventTurn(e apiv1.TaskEvent) string {
	var d struct {
		Turn string `json:"turn"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.Turn
}

func (a taskCmds) taskSendCmd() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:   "send ID TEXT",
		Short: "Send a follow-up prompt (a suspended session resumes)",
		Long: `Send a follow-up prompt to a task's agent. The conversation continues where
it was: if the task's session was suspended (idle timeout, or
` + "`engrams session suspend`" + `), it is resumed transparently, on any compatible host,
and the agent gets the prompt with every earlier turn. --follow streams the
answer until the agent is done with it.`,
		Example: `  engrams task send 0193f2a1-... "now add a test for it"
  engrams task send 0193f2a1-... --follow "what did you change?"`,
		Args: usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			e, err := c.Tasks().Send(cmd.Context(), args[0], args[1])
			if err != nil {
				return fmt.Errorf("send to task: %w", err)
			}
			if !follow {
				if a.jsonOut {
					return printJSON(cmd.OutOrStdout(), e)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "sent (event %d)\n", e.Seq)
				return nil
			}
			return a.followTask(cmd, c, args[0], e.Seq-1, e.Seq)
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "stream the conversation until the agent is done with this prompt")
	return cmd
}

func (a taskCmds) taskDiffCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "diff ID",
		Short: "Show the changes in the task's repositories (unified diff against the cloned commit)",
		Example: `  engrams task diff 0193f2a1-...
  engrams task diff 0193f2a1-... > agent.patch && git apply -p1 --directory=.. agent.patch`,
		Long: `Print the changes the agent made in each repository the task cloned, as one
unified diff against the commit it was cloned at: modified, added (also
untracked) and deleted files; ignored files are left out. Paths are relative
to /work, so the output applies with ` + "`git apply -p1`" + ` from a directory holding the
repositories. A suspended session resumes to answer. On a terminal, control
characters in the diff are not printed; redirect it for its exact bytes.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			d, err := c.Tasks().Diff(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("diff task: %w", err)
			}
			out := a.termOut(cmd.OutOrStdout())
			if a.jsonOut {
				return printJSON(out, d)
			}
			if len(d.Repos) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "the task cloned no repositories")
			}
			for _, r := range d.Repos {
				_, _ = io.WriteString(out, r.Patch())
			}
			return nil
		},
	}
}

func (a taskCmds) taskStopCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stop ID",
		Short: "Interrupt the agent and stop the task (its session is suspended)",
		Long: `Stop a task: the agent's current turn is interrupted, the task is marked
stopped and its session suspended (its files stay: task diff and task files
still work). A stopped task takes no more prompts.`,
		Example: `  engrams task stop 0193f2a1-...`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			t, err := c.Tasks().Stop(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("stop task: %w", err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), t)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "task %s %s\n", t.ID, t.State)
			return nil
		},
	}
}

func (a taskCmds) taskFilesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "files ID [PATH]",
		Short: "Print a file of the task's session, or list a directory",
		Example: `  engrams task files 0193f2a1-...
  engrams task files 0193f2a1-... app/hello.txt
  engrams task files 0193f2a1-... app --json`,
		Long: `Print a file from the task's session to stdout, or list a directory (as JSON
with --json). PATH is relative to /work, where the repositories are cloned
(default: /work itself). A suspended session resumes to answer. On a
terminal, control characters in the file are not printed (they could drive
the terminal); redirect or pipe it for its exact bytes.`,
		Args: usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p := ""
			if len(args) == 2 {
				p = args[1]
			}
			var buf strings.Builder
			isDir, err := c.Tasks().File(cmd.Context(), args[0], p, &buf)
			if err != nil {
				return fmt.Errorf("read task file: %w", err)
			}
			out := a.termOut(cmd.OutOrStdout())
			if !isDir || a.jsonOut {
				_, err = io.WriteString(out, buf.String())
				return err
			}
			var list []struct {
				Name  string `json:"name"`
				Size  int64  `json:"size"`
				Mode  string `json:"mode"`
				IsDir bool   `json:"is_dir"`
			}
			if err := json.Unmarshal([]byte(buf.String()), &list); err != nil {
				return fmt.Errorf("decode directory listing: %w", err)
			}
			tw := newTable(out)
			for _, f := range list {
				name := f.Name
				if f.IsDir {
					name += "/"
				}
				row(tw, f.Mode, f.Size, name)
			}
			return tw.Flush()
		},
	}
}

// printTaskHeader writes what `task get` says of a task above its
// conversation: state and session, profile and model, who started it and
// when, its tokens and their cost. The profile's name is looked up; its id
// stands in when that fails.
func (a taskCmds) printTaskHeader(ctx context.Context, w io.Writer, c *client.Client, t apiv1.Task) {
	fmt.Fprintf(w, "task %s: %s\n", t.ID, t.Title)
	fmt.Fprintf(w, "state: %s   session: %s\n", t.State, orDash(t.SessionID))
	if t.Error != "" {
		fmt.Fprintf(w, "error: %s\n", t.Error)
	}
	profile := t.ProfileID
	if p, err := c.Profiles().Get(ctx, t.ProfileID); err == nil {
		profile = p.Profile.Name
	}
	model := t.Usage.Model
	if model == "" && t.Receipt != nil {
		model = t.Receipt.Model
	}
	fmt.Fprintf(w, "profile: %s (version %d)   model: %s\n", profile, t.ProfileVersion, orDash(model))
	starter := "a user (API, CLI or dashboard)"
	switch {
	case t.RunID != "":
		starter = "automation run " + t.RunID
	case t.StartedBy != "":
		starter = "token " + t.StartedBy
	}
	fmt.Fprintf(w, "started by: %s\n", starter)
	fmt.Fprintf(w, "created: %s   updated: %s\n", a.whenAgo(t.CreatedAt), a.whenAgo(t.UpdatedAt))
	u := t.Usage
	fmt.Fprintf(w, "tokens: %s   cost: %s\n", tokensText(u.TokenCounts), taskCost(u))
	fmt.Fprintln(w)
}

// taskCost is a task's cost for a person, saying how many usage events
// it leaves out for want of a price.
func taskCost(u apiv1.TaskUsage) string {
	s := money(u.Cost)
	if u.Unpriced > 0 {
		s += fmt.Sprintf(" (+%d not priced)", u.Unpriced)
	}
	return s
}
