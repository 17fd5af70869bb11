package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
)

func (a sessionCmds) sessionSuspendCmd() *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "suspend ID",
		Short: "Snapshot a session and free its host now",
		Long: `Suspend a session now instead of after its idle timeout: sync its
filesystems, snapshot memory and disk into content-addressed chunks, upload
only the chunks the store lacks, commit, and destroy the VM. The session is
then idle and holds no host resources; running processes are frozen, not
stopped.

It comes back with ` + "`engrams session resume`" + `, or by itself on the next exec,
file operation, outbox item or ` + "`logs --follow`" + `, on any compatible host. By
default the command waits until the suspend ended and says how: suspended
at its snapshot (also when a request such as an exec resumed the session
right after: exit 0), or why not (the snapshot failed, or a delete came
first: exit 1).`,
		Example: `  engrams session suspend 0193a1b2-...
  engrams session suspend --no-wait 0193a1b2-...
  engrams session suspend --json 0193a1b2-... | jq -r .head_snapshot_id`,
		Args:        usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{annConflict: "only an active session can be suspended; see `engrams session get ID`"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Sessions().Suspend(cmd.Context(), args[0], !noWait)
			if err != nil {
				return fmt.Errorf("suspend session %s: %w", args[0], err)
			}
			if a.jsonOut {
				if err := printJSON(cmd.OutOrStdout(), s); err != nil {
					return err
				}
			}
			if noWait {
				if !a.jsonOut {
					fmt.Fprintln(cmd.OutOrStdout(), "suspending", s.ID)
				}
				return nil
			}
			msg, err := suspendReport(s)
			if err == nil && !a.jsonOut {
				fmt.Fprintln(a.termOut(cmd.OutOrStdout()), msg)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return at once instead of waiting until the session is idle")
	return cmd
}

// suspendReport says how the suspend that answered s ended: the snapshot
// it committed even when a request (an exec, an outbox item) resumed the
// session right after, or why it did not suspend (an error). A server
// that does not say (s.Suspend nil) is judged by the session's state.
func suspendReport(s apiv1.Session) (string, error) {
	hint := "see `engrams session get " + s.ID + "` for its snapshots and operations"
	o := s.Suspend
	if o == nil {
		o = &apiv1.SuspendOutcome{Result: apiv1.SuspendSuspended, SnapshotID: s.HeadSnapshot}
		if s.State != "idle" {
			o = &apiv1.SuspendOutcome{Result: apiv1.SuspendFailed, Why: s.Reason}
		}
	}
	at := fmt.Sprintf("suspended %s at snapshot %s", s.ID, o.SnapshotID)
	switch o.Result {
	case apiv1.SuspendSuspended, apiv1.SuspendAlreadyIdle:
		return at + "; it resumes when used, or with `engrams session resume " + s.ID + "`", nil
	case apiv1.SuspendResumedSince:
		return at + "; a request resumed it since (it is " + s.State + " now)", nil
	case apiv1.SuspendEndedSince:
		return at + "; since then it is " + s.State + because(s.Reason), nil
	case apiv1.SuspendSuperseded:
		return "", &hintError{err: fmt.Errorf("session %s was not suspended: %s; it is %s", s.ID, o.Why, s.State), hint: hint}
	}
	return "", &hintError{err: fmt.Errorf("session %s is %s, not idle, after suspend%s", s.ID, s.State, because(o.Why)), hint: hint}
}

func because(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + reason
}

func (a sessionCmds) sessionResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Bring an idle session back and wait until it is active",
		Long: `Resume an idle session: restore its head snapshot (memory and disk, with its
processes where they stopped) on a host that still caches its chunks, else
on any compatible host with room, which fetches and verifies them. The
command waits until the session is active and prints the host it runs on.

You rarely need this: exec, file operations, outbox items and ` + "`logs --follow`" + `
resume an idle session by themselves. Resuming an active session does
nothing.`,
		Example: `  engrams session resume 0193a1b2-...
  engrams session resume --json 0193a1b2-... | jq -r .host_id`,
		Args: usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{annConflict: "only an idle or active session can be resumed, and only from a snapshot " +
			"that can be restored; see `engrams session get ID` for its state and reason"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Sessions().Resume(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("resume session %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), s)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "session %s is %s on host %s\n", s.ID, s.State, s.HostID)
			return nil
		},
	}
}

func (a sessionCmds) sessionSnapshotCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a running session and keep it running",
		Long: `Take a snapshot of an active session without stopping it and wait until it is
committed; it becomes the session's head, the state a resume restores. Only
chunks the store lacks are uploaded, so a snapshot soon after another is
cheap. Prints the snapshot id, its size and the bytes uploaded; see every
snapshot with ` + "`engrams session get ID`" + `.`,
		Example: `  engrams session snapshot 0193a1b2-...
  snap=$(engrams session snapshot --json 0193a1b2-... | jq -r .id)`,
		Args:        usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{annConflict: "only an active session can be snapshotted, one operation at a time; see `engrams session get ID`"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sn, err := c.Sessions().Snapshot(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("snapshot session %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), sn)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "snapshot %s: %s, %s uploaded\n", sn.ID, bytesize(sn.Bytes), bytesize(sn.Uploaded))
			return nil
		},
	}
}

// bytesize renders n bytes in binary units ("512 B", "4.0 MiB").
func bytesize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func (a sessionCmds) sessionOutboxCmd() *cobra.Command {
	cmd := group("outbox", "Send commands into a session, applied exactly once",
		`The outbox holds commands for a session's guest (the agent harness takes its
prompts from it). Each item has your id, which makes sending it again
harmless, and is applied exactly once, in order, across suspends, resumes
and host loss. An item is pending (recorded), then delivered (the running
guest applied it), then durable (a committed snapshot includes it).`)
	cmd.AddCommand(a.outboxSendCmd(), a.outboxListCmd())
	return cmd
}

func (a sessionCmds) outboxSendCmd() *cobra.Command {
	var (
		req     apiv1.OutboxRequest
		payload string
	)
	cmd := &cobra.Command{
		Use:   "send ID --id KEY --kind KIND [--payload JSON]",
		Short: "Queue a command for a session",
		Long: `Queue a command for a session and return at once; the coordinator delivers
it, resuming the session if it is idle. --id is yours to choose: sending
the same id again returns the first item and queues nothing, so retries are
safe. --payload is JSON (kind-specific, under 1 MiB).`,
		Example: `  engrams session outbox send 0193a1b2-... --id prompt-1 --kind prompt --payload '{"text":"run the tests"}'
  engrams session outbox send --json 0193a1b2-... --id ping-7 --kind ping`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if payload != "" {
				if !json.Valid([]byte(payload)) {
					return usageError{errors.New("--payload: not valid JSON (quote strings: '\"text\"')")}
				}
				req.Payload = json.RawMessage(payload)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			it, err := c.Sessions().PutOutbox(cmd.Context(), args[0], req)
			if err != nil {
				return fmt.Errorf("send %s to session %s: %w", req.ID, args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), it)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "outbox item %s (seq %d) is %s\n", it.ID, it.Seq, it.State)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.ID, "id", "", "your key for the item; the same key is applied only once (required)")
	f.StringVar(&req.Kind, "kind", "", "what the guest should do, e.g. prompt (required)")
	f.StringVar(&payload, "payload", "", "the item's JSON payload")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.MarkFlagRequired("kind")
	return cmd
}

func (a sessionCmds) outboxListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list ID",
		Aliases: []string{"ls"},
		Short:   "List a session's outbox items and where each is",
		Long: `List a session's outbox items in the order they are applied, with their
state: pending (recorded, not yet applied), delivered (applied by the
running guest) or durable (a committed snapshot includes it).`,
		Example: `  engrams session outbox list 0193a1b2-...
  engrams session outbox list --json 0193a1b2-... | jq '.items[] | select(.state == "pending")'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			items, err := c.Sessions().ListOutbox(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("list outbox of session %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), items, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "SEQ", "ID", "KIND", "STATE", "CREATED", "PAYLOAD")
			for _, it := range items {
				row(tw, it.Seq, it.ID, it.Kind, it.State, a.when(it.CreatedAt), short(it.Payload, 60))
			}
			return tw.Flush()
		},
	}
}

// parseIdleTimeout reads --idle-timeout: a duration of at least 1s
// (rounded up to whole seconds), 0 for the server default or "never".
func parseIdleTimeout(s string) (int, error) { return parseSeconds("--idle-timeout", s) }

// parseSeconds reads a duration flag as the API reads the same setting
// (apiv1.ParseSeconds), naming the flag in its error.
func parseSeconds(flag, s string) (int, error) {
	n, err := apiv1.ParseSeconds(s)
	if err != nil {
		return 0, usageError{fmt.Errorf("%s %w", flag, err)}
	}
	return n, nil
}

// idleTimeout shows a seconds setting: the server default, never, or a duration.
func idleTimeout(sec int) string {
	switch {
	case sec == 0:
		return "server default"
	case sec < 0:
		return "never"
	}
	return (time.Duration(sec) * time.Second).String()
}
