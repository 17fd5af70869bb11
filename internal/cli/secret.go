package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/engrams/engrams/api/apiv1"
)

func (a secretCmds) secretCmd() *cobra.Command {
	cmd := group("secret", "Store model keys and git logins for profiles",
		`Secrets are credentials profiles name: model provider keys
(anthropic_api_key, openai_api_key), git HTTPS logins (git_https), GitHub
Apps (github_app) and others (generic). The server stores them encrypted
and never shows or logs a value again. Model keys never enter a task's VM:
the guest sees a placeholder and the model gateway adds the key to its
requests. Git logins and GitHub Apps stay with the coordinator, which clones
the repositories (with a GitHub App: a short-lived token it mints, scoped
to the profile's repositories).`)
	cmd.Aliases = []string{"secrets"}
	cmd.Annotations = map[string]string{
		annNotFound: "list secrets with `engrams secret list`",
		annConflict: "a secret with that name exists: delete it first to replace it (`engrams secret delete NAME`)",
	}
	cmd.AddCommand(a.secretCreateCmd(), a.secretListCmd(), a.secretDeleteCmd())
	return cmd
}

func (a secretCmds) secretCreateCmd() *cobra.Command {
	var (
		req      apiv1.CreateSecretRequest
		fromFile string
	)
	cmd := &cobra.Command{
		Use:   "create NAME --kind KIND",
		Short: "Store a secret (its value read from stdin, never echoed)",
		Long: `Store a secret under NAME. KIND is anthropic_api_key, openai_api_key,
git_https, github_app or generic. The value is read from stdin (typed at a terminal,
it is not echoed; piped, its trailing newline is dropped) or from
--from-file, never from a flag, so it stays out of your shell history.

--base-url is where a model key is used (default https://api.anthropic.com
for anthropic_api_key, https://api.openai.com/v1 for openai_api_key): the
model gateway forwards requests there. It must be https; plain http only to
this machine (localhost, 127.0.0.1, ::1). For git_https give --username
(the login; GitHub accepts any, e.g. x-access-token) and --host (the git
host it is for, e.g. github.com; required unless --base-url is on it):
profiles may use it only for repositories on that host.

For github_app the value is the app's private key (the .pem file GitHub
made for it; --from-file), with --app-id (its client ID or app ID) and
--installation-id (of its installation on the repositories' account).
--base-url is the REST API (default https://api.github.com; GitHub
Enterprise Server: https://HOST/api/v3), and the git host follows from it.
For each task the coordinator mints an installation token that lasts an
hour, scoped to the profile's repositories with contents:read and
metadata:read, and clones with it; the credential broker mints the
guest's with what each repository grants (contents:write with --repo-push,
pull_requests and issues with --repo-api). To replace a
secret, delete it and create it again: profiles name secrets, so they use
the new one.`,
		Example: `  engrams secret create anthropic --kind anthropic_api_key
  printf %s "$OPENAI_API_KEY" | engrams secret create openai --kind openai_api_key
  engrams secret create gh --kind git_https --username x-access-token --host github.com --from-file ~/.gh-token
  engrams secret create acme-bot --kind github_app --app-id Iv23liAbCdEf --installation-id 4242 --from-file acme-bot.private-key.pem`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			if req.Kind == "" {
				return usageError{errors.New("--kind is required: anthropic_api_key, openai_api_key, git_https, github_app or generic")}
			}
			var err error
			if req.Value, err = a.readSecretValue(cmd, req.Name, fromFile); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Secrets().Create(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create secret %s: %w", req.Name, err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), s)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "secret %s (%s) is stored, id %s; its value is never shown again\n", s.Name, s.Kind, s.ID)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Kind, "kind", "", "`KIND`: anthropic_api_key, openai_api_key, git_https, github_app or generic")
	f.StringVar(&req.Meta.BaseURL, "base-url", "", "https `URL` the key is used at (model keys: the provider's API by default; http only to localhost)")
	f.StringVar(&req.Meta.Username, "username", "", "git_https: the login `NAME`")
	f.StringVar(&req.Meta.Host, "host", "", "git_https (required unless --base-url names it): the git `HOST` it is for, e.g. github.com")
	f.StringVar(&req.Meta.AppID, "app-id", "", "github_app: the app's client `ID` (Iv1...) or numeric app ID")
	f.Int64Var(&req.Meta.InstallationID, "installation-id", 0, "github_app: the `ID` of the app's installation on the repositories' account")
	f.StringVar(&fromFile, "from-file", "", "read the value from `FILE` instead of stdin")
	return cmd
}

// readSecretValue reads a secret's value from file, or from stdin: at a
// terminal with echo off, else all of it. A trailing newline is dropped;
// an empty value is refused. The value never appears in an error.
func (a secretCmds) readSecretValue(cmd *cobra.Command, name, file string) (string, error) {
	var b []byte
	var err error
	from := "stdin"
	switch fd, tty := a.terminalFD(cmd.InOrStdin()); {
	case file != "":
		from = file
		var f *os.File
		if f, err = os.Open(file); err == nil {
			b, err = io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
			f.Close()
		}
	case tty:
		fmt.Fprintf(cmd.ErrOrStderr(), "value of secret %s: ", name)
		b, err = term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
	default:
		b, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxSecretBytes+1))
	}
	if err != nil {
		return "", fmt.Errorf("read the value of secret %s from %s: %w", name, from, err)
	}
	if len(b) > maxSecretBytes {
		return "", usageError{fmt.Errorf("the value on %s is over %d bytes", from, maxSecretBytes)}
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if v == "" {
		return "", usageError{fmt.Errorf("the value of secret %s on %s is empty: pipe it in, e.g. printf %%s \"$KEY\" | engrams secret create %s --kind KIND", name, from, name)}
	}
	return v, nil
}

func (a secretCmds) secretListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List secrets (never their values)",
		Long:    "List the stored secrets by name: id, kind, where they are used (base URL, login, host), the profiles naming them and when they were made.",
		Example: `  engrams secret list
  engrams secret list --json | jq -r '.items[] | select(.kind == "git_https") | .name'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ss, err := c.Secrets().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list secrets: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ss, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "NAME", "KIND", "BASE URL", "USERNAME", "HOST", "USED BY", "ID", "CREATED")
			for _, s := range ss {
				login := s.Meta.Username
				if s.Kind == apiv1.SecretGitHubApp {
					login = fmt.Sprintf("app %s, installation %d", s.Meta.AppID, s.Meta.InstallationID)
				}
				row(tw, s.Name, s.Kind, s.Meta.BaseURL, login, s.Meta.Host, strings.Join(s.UsedBy, ","), s.ID, a.when(s.CreatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a secretCmds) secretDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a secret",
		Long: `Delete a secret: its encrypted value is erased and its name is free again.
Running tasks granted it can no longer use it (the model gateway refuses
a deleted key); profiles naming it cannot start tasks until a secret with
that name exists again (the command lists them). Deleting and creating a
secret under the same name is how a key is rotated.`,
		Example: `  engrams secret delete anthropic`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			s, err := c.Secrets().Delete(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("delete secret %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), s)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted secret %s (%s)\n", s.Name, s.ID)
			if len(s.UsedBy) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: profiles %s name it: their tasks cannot start until a secret named %s exists again (`engrams secret create %s --kind %s`)\n",
					strings.Join(s.UsedBy, ", "), s.Name, s.Name, s.Kind)
			}
			return nil
		},
	}
}
