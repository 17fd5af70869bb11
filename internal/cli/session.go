package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

func (a sessionCmds) sessionCmd() *cobra.Command {
	cmd := group("session", "Create, inspect, run commands in, suspend and delete sessions",
		`A session is one sandbox: an image running in its own microVM on one host.
A session unused for its idle timeout is suspended: snapshotted into
content-addressed chunks and its VM destroyed, so it holds no host. It is
resumed transparently, on any compatible host, when you use it again.`)
	cmd.Aliases = []string{"sessions", "s"}
	cmd.Annotations = map[string]string{
		annNotFound: "list sessions with `engrams session list`",
		annConflict: "the session is not in a state that allows this; check it with `engrams session get ID`",
	}
	cmd.AddCommand(a.sessionCreateCmd(), a.sessionListCmd(), a.sessionGetCmd(),
		a.sessionExecCmd(), a.sessionLogsCmd(), a.sessionEgressCmd(), a.sessionDeleteCmd(),
		a.sessionSuspendCmd(), a.sessionResumeCmd(), a.sessionSnapshotCmd(), a.sessionOutboxCmd(), a.sessionCpCmd())
	return cmd
}

// parseEnv turns K=V pairs into a map.
func parseEnv(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	env := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
		}
		env[k] = v
	}
	return env, nil
}

func (a sessionCmds) sessionCreateCmd() *cobra.Command {
	var (
		req      apiv1.CreateSessionRequest
		env      []string
		idle     string
		lifetime string
		noWait   bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print its id",
		Long: `Create a session: boot a microVM. --image takes the name of an image
enabled with ` + "`engrams image enable`" + `: the session starts from its warm base
snapshot, with the image's memory, vCPUs and environment (--env adds to
it). By default the command waits until the session is active and prints
its id; with --json it prints the whole session. --idempotency-key makes
retries safe: a second create with the same key returns the first session
instead of making another. --idle-timeout says how long the session may go
unused before it is suspended (0: the server's default; never: keep it
running). --max-lifetime is a hard time limit: the session ends dead that
long after it was created, whatever it is doing (0: the server's default;
never: no limit).`,
		Example: `  engrams session create
  engrams session create --image web
  engrams session create --memory 2048 --vcpus 2 --env GOFLAGS=-mod=mod
  engrams session create --idle-timeout 15m --max-lifetime 24h
  id=$(engrams session create --idempotency-key ci-run-42)`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.Env, err = parseEnv(env); err != nil {
				return err
			}
			if req.MemoryMiB < 0 || req.VCPUs < 0 {
				return usageError{errors.New("--memory and --vcpus must not be negative")}
			}
			if req.IdleTimeoutSec, err = parseIdleTimeout(idle); err != nil {
				return err
			}
			if req.MaxLifetimeSec, err = parseSeconds("--max-lifetime", lifetime); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Sessions().Create(cmd.Context(), req, !noWait)
			if err != nil {
				return fmt.Errorf("create session: %w", err)
			}
			if a.jsonOut {
				if err := printJSON(cmd.OutOrStdout(), s); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), s.ID)
			}
			if s.State == "dead" {
				return fmt.Errorf("session %s failed to start: %s", s.ID, s.Reason)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&req.MemoryMiB, "memory", 0, "guest memory in MiB (default: the server's)")
	f.IntVar(&req.VCPUs, "vcpus", 0, "virtual CPUs (default 1)")
	f.StringArrayVar(&env, "env", nil, "environment variable KEY=VALUE for every command (repeatable)")
	f.StringArrayVar(&req.Egress, "egress", nil, "`HOST[:PORT]` or *.SUFFIX the guest may reach (repeatable; ports 80 and 443 when none is given; none: no network)")
	f.StringVar(&req.Image, "image", "", "the `NAME` of an enabled image (see engrams image list; default: the server's)")
	f.StringVar(&req.Harness, "harness", "", "the agent `HARNESS` to attach, NAME or NAME@VERSION (refused at once if it cannot run on the image)")
	f.BoolVar(&noWait, "no-wait", false, "return at once instead of waiting until the session is active")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "create at most one session per key")
	f.StringVar(&idle, "idle-timeout", "0", "suspend after this long unused, e.g. 15m (0: the server's default; never: don't)")
	f.StringVar(&lifetime, "max-lifetime", "0", "end the session dead this long after creation, e.g. 24h (0: the server's default; never: no limit)")
	return cmd
}

func (a sessionCmds) sessionListCmd() *cobra.Command {
	var filter client.SessionFilter
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List sessions",
		Long:    "List sessions, newest first, optionally only those in one state or on one host.",
		Example: `  engrams session list
  engrams session list --state active
  engrams session list --json | jq -r '.items[].id'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.Sessions().List(cmd.Context(), filter)
			if err != nil {
				return fmt.Errorf("list sessions: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), l, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "ID", "STATE", "HOST", "IMAGE", "MEMORY", "VCPUS", "CREATED")
			for _, s := range l {
				row(tw, s.ID, s.State, s.HostID, s.Spec.Image, memory(s.Spec.MemoryMiB), s.Spec.VCPUs, a.when(s.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&filter.State, "state", "", "only sessions in this state (created, starting, active, idle, ..., completed, dead)")
	cmd.Flags().StringVar(&filter.HostID, "host", "", "only sessions on this host id")
	return cmd
}

func memory(mib int) string {
	if mib == 0 {
		return ""
	}
	return fmt.Sprintf("%d MiB", mib)
}

func (a sessionCmds) sessionGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"show"},
		Short:   "Show a session, its operations and snapshots",
		Long: `Show a session: its state, host, spec, head snapshot and last activity, the
op log of its lifecycle operations (create, resume, suspend, snapshot,
destroy, move, recover) with their errors, and its snapshot history
(oldest first) with each snapshot's size and the bytes it uploaded.`,
		Example: `  engrams session get 0193a1b2-...
  engrams session get --json 0193a1b2-... | jq .state`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Sessions().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get session %s: %w", args[0], err)
			}
			out := a.termOut(cmd.OutOrStdout())
			if a.jsonOut {
				return printJSON(out, s)
			}
			return a.printSession(out, s)
		},
	}
}

func (a sessionCmds) printSession(w io.Writer, s apiv1.Session) error {
	tw := newTable(w)
	env := make([]string, 0, len(s.Spec.Env))
	for _, k := range slices.Sorted(maps.Keys(s.Spec.Env)) {
		env = append(env, k+"="+s.Spec.Env[k])
	}
	for _, kv := range [][2]any{
		{"ID", s.ID},
		{"State", fmt.Sprintf("%s (desired: %s)", s.State, s.DesiredState)},
		{"Reason", s.Reason},
		{"Host", s.HostID},
		{"Epoch", s.Epoch},
		{"Image", s.Spec.Image},
		{"Memory", memory(s.Spec.MemoryMiB)},
		{"vCPUs", s.Spec.VCPUs},
		{"Env", strings.Join(env, " ")},
		{"Idle timeout", idleTimeout(s.Spec.IdleTimeoutSec)},
		{"Time limit", idleTimeout(s.Spec.MaxLifetimeSec)},
		{"Head snapshot", s.HeadSnapshot},
		{"Last activity", a.whenAgo(s.LastActivity)},
		{"Created", a.when(s.CreatedAt)},
		{"Updated", a.when(s.UpdatedAt)},
	} {
		row(tw, fmt.Sprint(kv[0])+":", kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Ops) > 0 {
		fmt.Fprintln(w, "\nOperations:")
		tw = newTable(w)
		row(tw, "ID", "KIND", "STATE", "STEP", "EPOCH", "ATTEMPTS", "UPDATED", "ERROR")
		for _, op := range s.Ops {
			row(tw, op.ID, op.Kind, op.State, op.Step, op.Epoch, op.Attempts, a.when(op.UpdatedAt), op.Error)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(s.Snapshots) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nSnapshots:")
	tw = newTable(w)
	row(tw, "ID", "CREATED", "REASON", "HOST", "SIZE", "UPLOADED")
	for _, sn := range s.Snapshots {
		row(tw, sn.ID, a.when(sn.CreatedAt), sn.Reason, sn.HostID, bytesize(sn.Bytes), bytesize(sn.Uploaded))
	}
	return tw.Flush()
}

func (a sessionCmds) sessionDeleteCmd() *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:     "delete ID",
		Aliases: []string{"rm"},
		Short:   "Delete a session",
		Long: `Delete a session: destroy its VM and snapshots. By default the command waits
until the VM is gone. The session's event log stays readable.`,
		Example: `  engrams session delete 0193a1b2-...
  engrams session delete --no-wait 0193a1b2-...`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.Sessions().Delete(cmd.Context(), args[0], !noWait); err != nil {
				return fmt.Errorf("delete session %s: %w", args[0], err)
			}
			verb := "deleted"
			if noWait {
				verb = "deleting"
			}
			fmt.Fprintln(cmd.OutOrStdout(), verb, args[0])
			return nil
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return at once instead of waiting until the VM is gone")
	return cmd
}

func (a sessionCmds) sessionLogsCmd() *cobra.Command {
	var (
		follow bool
		after  int64
	)
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print a session's events",
		Long: `Print a session's events: state changes, operations and output its harness
reports. Text output shows time, type and a one-line summary of the data;
--json prints each event as one JSON object per line (on a terminal,
without the control characters a guest may have put in it). With --follow the
command keeps printing new events (reconnecting if the connection drops,
without losing or repeating any) until the session ends or you press Ctrl-C.`,
		Example: `  engrams session logs 0193a1b2-...
  engrams session logs --follow 0193a1b2-...
  engrams session logs --json --after 120 0193a1b2-... | jq .type`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			out := a.termOut(cmd.OutOrStdout())
			enc := json.NewEncoder(out)
			err = c.Sessions().Events(cmd.Context(), args[0], after, follow, func(ev apiv1.Event) error {
				if a.jsonOut {
					return enc.Encode(ev)
				}
				_, err := fmt.Fprintf(out, "%s  %-16s %s\n", a.when(ev.Time), ev.Type, short(ev.Data, 120))
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("events of session %s: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new events")
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this seq")
	return cmd
}
