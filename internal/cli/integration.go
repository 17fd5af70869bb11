package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
)

func (a autoCmds) integrationCmd() *cobra.Command {
	cmd := group("integration", "Connect Slack, GitHub and Linear",
		`Configure the services automations are triggered from and post to. Each is
configured once; its credentials are sealed at rest and never shown again.
Adding one installs its built-in automations, disabled: enable them with
`+"`engrams automation enable NAME`"+`.`)
	cmd.Aliases = []string{"integrations"}
	cmd.Annotations = map[string]string{annNotFound: "list integrations with `engrams integration list`"}
	cmd.AddCommand(a.integrationAddCmd(), a.integrationListCmd(), a.integrationRemoveCmd())
	return cmd
}

func (a autoCmds) integrationAddCmd() *cobra.Command {
	var secrets []string
	var f integrationFlags
	var appID string
	var installation int64
	cmd := &cobra.Command{
		Use:   "add slack|github|linear --secret NAME=VALUE... [flags]",
		Short: "Configure an integration (again) and install its built-in automations",
		Long: `Configure an integration. Credentials are given as --secret NAME=VALUE, or
NAME=- to read the value from stdin (one per line, in order), so they stay
out of shell history:

  slack   bot_token (xoxb-…), signing_secret; app_token (xapp-…) for Socket Mode
  github  token, or private_key (a GitHub App's, with --app-id and --installation-id)
  linear  api_key, webhook_secret

Slack's events arrive at POST /v1/integrations/slack/events (the Slack app's
request URL), or over Socket Mode (--socket-mode, no public URL needed).
Each channel names the profiles its mentions may use (--channel, the first
its default; [profile=NAME] in a mention picks another of them); channels
not named use --default-profile only. A task's thread is steered by the
person who started it, and by the users named with --thread-user; users of
other workspaces (Slack Connect) are refused unless --allow-external.

An --api-url on loopback or a private address is refused unless the server
was started with --allow-integration-url (engrams dev allows loopback).`,
		Example: `  printf '%s\n%s\n' "$BOT_TOKEN" "$SIGNING_SECRET" | engrams integration add slack \
      --secret bot_token=- --secret signing_secret=- --channel C0123=agent,reviewer --default-profile agent \
      --thread-user U0LEAD
  engrams integration add slack --secret bot_token=- --secret signing_secret=- --secret app_token=- --socket-mode
  engrams integration add github --secret token=- --secret webhook_secret=- --repo acme/app
  engrams integration add linear --secret api_key=- --secret webhook_secret=- --default-profile agent --repo acme/app`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			vals, err := readSecrets(cmd, secrets)
			if err != nil {
				return err
			}
			config, err := f.config(args[0])
			if err != nil {
				return err
			}
			if appID != "" {
				config["app_id"], config["installation_id"] = appID, installation
			}
			raw, _ := json.Marshal(config)
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Integrations().Add(cmd.Context(), apiv1.AddIntegrationRequest{Kind: args[0], Config: raw, Secrets: vals})
			if err != nil {
				return fmt.Errorf("add integration %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "configured %s (credentials: %s)\n", r.Kind, strings.Join(r.Secrets, ", "))
			for _, b := range r.Builtins {
				fmt.Fprintf(cmd.OutOrStdout(), "installed built-in automation %s, disabled: engrams automation enable %s\n", b, b)
			}
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringArrayVar(&secrets, "secret", nil, "a credential `NAME=VALUE` (VALUE - reads a line of stdin; repeatable)")
	fs.StringArrayVar(&f.channels, "channel", nil, "slack: `CHANNEL_ID=PROFILE[,PROFILE...]`, the profiles mentions in that channel may use, "+
		"the first its default (repeatable)")
	fs.StringVar(&f.profile, "default-profile", "", "slack: the `PROFILE` of mentions elsewhere; linear: of issues' tasks")
	fs.StringArrayVar(&f.repos, "repo", nil, "github: a repository `OWNER/NAME` whose deliveries are taken and reviewed (repeatable);\n"+
		"linear: the one issues' pull requests are opened on")
	fs.StringArrayVar(&f.threadUsers, "thread-user", nil, "slack: a `USER_ID` who may steer any thread's task (repeatable; others steer only threads they started)")
	fs.BoolVar(&f.external, "allow-external", false, "slack: let users of other workspaces (Slack Connect) start and steer tasks")
	fs.StringVar(&f.apiURL, "api-url", "", "the service's API base `URL` (default: the public one)")
	fs.StringVar(&f.dashboard, "dashboard-url", "", "this deployment's dashboard `URL`, for links back to tasks")
	fs.StringVar(&appID, "app-id", "", "github: the GitHub App's `ID` (with --installation-id and the private_key secret)")
	fs.Int64Var(&installation, "installation-id", 0, "github: the App's installation `ID` on the repositories' account")
	fs.BoolVar(&f.socket, "socket-mode", false, "slack: take events over Socket Mode (needs the app_token)")
	return cmd
}

// integrationFlags are add's settings flags.
type integrationFlags struct {
	apiURL, dashboard, profile   string
	channels, repos, threadUsers []string
	socket, external             bool
}

func (a autoCmds) integrationListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the configured integrations",
		Long:    "List the configured integrations: their settings and the names of their credentials (never the values).",
		Example: "  engrams integration list",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ins, err := c.Integrations().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list integrations: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ins, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "KIND", "CREDENTIALS", "SETTINGS", "UPDATED")
			for _, in := range ins {
				row(tw, in.Kind, strings.Join(in.Secrets, ","), short(in.Config, 60), a.whenAgo(in.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a autoCmds) integrationRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "remove slack|github|linear",
		Aliases: []string{"rm"},
		Short:   "Forget an integration's settings and credentials",
		Long:    "Forget an integration. Its automations stay; their triggers get no deliveries and their posts fail until it is added again.",
		Example: "  engrams integration remove slack",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.Integrations().Remove(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("remove integration %s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "removed %s\n", args[0])
			return nil
		},
	}
}

// readSecrets reads --secret NAME=VALUE values; VALUE - is the next line
// of stdin.
func readSecrets(cmd *cobra.Command, secrets []string) (map[string]string, error) {
	in := bufio.NewScanner(cmd.InOrStdin())
	vals := map[string]string{}
	for _, s := range secrets {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usageError{fmt.Errorf("--secret %q: want NAME=VALUE or NAME=-", s)}
		}
		if v == "-" {
			if !in.Scan() {
				return nil, usageError{fmt.Errorf("--secret %s=-: stdin has no line for it", k)}
			}
			v = strings.TrimSpace(in.Text())
		}
		vals[k] = v
	}
	return vals, nil
}

// config is an integration's settings from add's flags, under the names
// its kind gives them.
func (f integrationFlags) config(kind string) (map[string]any, error) {
	config := map[string]any{}
	profileKey := "default_profile"
	if kind == "linear" {
		profileKey = "profile"
	}
	repos, channels := f.repos, f.channels
	for k, v := range map[string]string{"api_url": f.apiURL, "dashboard_url": f.dashboard, profileKey: f.profile} {
		if v != "" {
			config[k] = v
		}
	}
	switch {
	case len(repos) == 0:
	case kind != "linear":
		config["repos"] = repos
	case len(repos) > 1:
		return nil, usageError{fmt.Errorf("--repo: linear opens pull requests on one repository, not %d", len(repos))}
	default:
		config["repo"] = repos[0]
	}
	if f.socket {
		config["socket_mode"] = true
	}
	if f.external {
		config["allow_external"] = true
	}
	if len(f.threadUsers) > 0 {
		config["thread_users"] = f.threadUsers
	}
	if len(channels) > 0 {
		m := map[string][]string{}
		for _, c := range channels {
			id, ps, ok := strings.Cut(c, "=")
			if !ok || id == "" || ps == "" || slices.Contains(strings.Split(ps, ","), "") {
				return nil, usageError{fmt.Errorf("--channel %q: want CHANNEL_ID=PROFILE[,PROFILE...]", c)}
			}
			m[id] = strings.Split(ps, ",")
		}
		config["channels"] = m
	}
	return config, nil
}

func (a taskCmds) taskPRCmd() *cobra.Command {
	var repo, title, path string
	cmd := &cobra.Command{
		Use:   "pr TASK --repo OWNER/NAME [--title T] [--path P]",
		Short: "Open a pull request of a task's changes (GitHub integration)",
		Long: `Push a task's changes as a branch (engrams/task-<id>) and open a pull request
of it on GitHub that links back to the task. The repository is cloned
again on the coordinator at the task's base, the task's diff applied and
committed, and pushed with the repository's credential (it never enters
the VM). Running it again pushes the task's changes now to the same branch
and prints the same pull request. --path picks the repository when the
task cloned several.`,
		Example: `  engrams task pr 01a2383a-ccec-7a90 --repo acme/app --title "Fix the flaky test"`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if repo == "" {
				return usageError{fmt.Errorf("--repo OWNER/NAME is required: the GitHub repository to open the pull request on")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, err := c.Tasks().PR(cmd.Context(), args[0], apiv1.TaskPRRequest{Repo: repo, Title: title, Path: path})
			if err != nil {
				return fmt.Errorf("open a pull request of task %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), pr)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "pull request #%d: %s\nbranch %s at %s\n", pr.Number, pr.URL, pr.Branch, pr.Commit)
			return nil
		},
	}
	cmd.Flags().StringVar(&repo, "repo", "", "the GitHub repository `OWNER/NAME`")
	cmd.Flags().StringVar(&title, "title", "", "the pull request's `TITLE` (default: the task's)")
	cmd.Flags().StringVar(&path, "path", "", "the task's repository `PATH` under /work (default: its only one)")
	return cmd
}
