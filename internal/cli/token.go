package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func (a tokenCmds) tokenCmd() *cobra.Command {
	cmd := group("token", "Create, list and revoke API tokens",
		`API tokens authenticate the CLI and other API clients (--token or
ENGRAMS_TOKEN). Only a hash is stored: a secret is shown once, when made.`)
	cmd.Aliases = []string{"tokens"}
	cmd.Annotations = map[string]string{annNotFound: "list tokens with `engrams token list`"}
	cmd.AddCommand(a.tokenCreateCmd(), a.tokenListCmd(), a.tokenRevokeCmd())
	return cmd
}

func (a tokenCmds) tokenCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Mint an API token and print its secret (shown only once)",
		Long: `Mint an API token. The secret goes to standard output, alone, so it can be
captured; a note goes to standard error. It is never shown again.`,
		Example: `  engrams token create laptop
  export ENGRAMS_TOKEN=$(engrams token create ci)`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Tokens().Create(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("create token %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s) created; its secret above is shown only this once: use it with --token or ENGRAMS_TOKEN\n",
				r.Token.ID, r.Token.Name)
			return nil
		},
	}
}

func (a tokenCmds) tokenListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API tokens (never their secrets)",
		Long:    "List user and host tokens with the visible prefix of each secret.",
		Example: `  engrams token list`,
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			toks, err := c.Tokens().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list tokens: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), toks, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "ID", "NAME", "KIND", "PREFIX", "HOST", "CREATED", "LAST USED")
			for _, t := range toks {
				last := "never"
				if !t.LastUsedAt.IsZero() {
					last = a.ago(t.LastUsedAt)
				}
				row(tw, t.ID, t.Name, t.Kind, t.Prefix, t.HostID, a.when(t.CreatedAt), last)
			}
			return tw.Flush()
		},
	}
}

func (a tokenCmds) tokenRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke an API token",
		Long: `Revoke a token: every request made with it fails from now on. Revoking a
host's token also closes that host's link within seconds, stops placing
sessions on it and recovers its sessions at once (see engrams host disable).`,
		Example: `  engrams token revoke t1`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.Tokens().Revoke(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("revoke token %s: %w", args[0], err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "revoked", args[0])
			return nil
		},
	}
}
