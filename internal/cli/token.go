package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
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
	var service bool
	var role, expires string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Make an API key and print its secret (shown only once)",
		Long: `Make an API key. A personal key acts as you, within its role and yours
(demoted, its role shrinks; removed, it stops). A service key (--service,
admins only) acts as itself in the organisation, for CI and bots. A key's
role is at most yours. The secret goes to standard output, alone, so it
can be captured; a note goes to standard error. It is never shown again.`,
		Example: `  engrams token create laptop
  engrams token create reader --role member --expires 720h
  export ENGRAMS_TOKEN=$(engrams token create ci --service --role member)`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := apiv1.CreateTokenRequest{Name: args[0], Role: role}
			if service {
				req.Kind = apiv1.KeyService
			}
			n, err := apiv1.ParseSeconds(expires)
			if err != nil {
				return usageError{fmt.Errorf("--expires %w", err)}
			}
			req.ExpiresIn = apiv1.Seconds(max(n, 0))
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Tokens().CreateKey(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("create token %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintln(cmd.OutOrStdout(), r.Secret)
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s) created: a %s key, role %s; its secret above is shown only this once: use it with --token or ENGRAMS_TOKEN\n",
				r.Token.ID, r.Token.Name, r.Token.Kind, orDash(r.Token.Role))
			return nil
		},
	}
	cmd.Flags().BoolVar(&service, "service", false, "a service key: acts as itself in the organisation (admins only)")
	cmd.Flags().StringVar(&role, "role", "", "member, admin or owner (default: yours; never more)")
	cmd.Flags().StringVar(&expires, "expires", "never", "expire after this long, e.g. 720h, or never")
	return cmd
}

func (a tokenCmds) tokenListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List API tokens (never their secrets)",
		Long:    "List keys with the visible prefix of each secret: your own, all of the organisation's for an admin, host tokens for a fleet operator.",
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
			row(tw, "ID", "NAME", "KIND", "ROLE", "PREFIX", "HOST", "CREATED", "EXPIRES", "LAST USED")
			for _, t := range toks {
				last, exp := "never", "never"
				if !t.LastUsedAt.IsZero() {
					last = a.ago(t.LastUsedAt)
				}
				if !t.ExpiresAt.IsZero() {
					exp = a.when(t.ExpiresAt)
				}
				row(tw, t.ID, t.Name, t.Kind, orDash(t.Role), t.Prefix, t.HostID, a.when(t.CreatedAt), exp, last)
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

// peopleCmds are engrams whoami, member and audit.
type peopleCmds struct{ *app }

func (a peopleCmds) whoAmICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "whoami",
		Short: "Say who your key acts as: the person, organisation, role and grants",
		Long: `Say who the key in use (--token, ENGRAMS_TOKEN or the config file)
acts as: a person or a service key, its organisation and role there, and
whether it holds the fleet operator grant (hosts).`,
		Example: "  engrams whoami\n  engrams whoami --json",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			me, err := c.People().WhoAmI(cmd.Context())
			if err != nil {
				return fmt.Errorf("who am I: %w", err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), me)
			}
			org := "no organisation"
			if me.OrgID != "" {
				org = fmt.Sprintf("%s in %s", me.Role, me.OrgName)
			}
			fleet := ""
			if me.FleetOperator {
				fleet = ", fleet operator"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s%s (%s key %s)\n", orDash(me.Name), org, fleet, me.KeyKind, me.KeyID)
			return nil
		},
	}
}

func (a peopleCmds) memberCmd() *cobra.Command {
	cmd := group("member", "List, add and remove the organisation's members (admins)",
		`Members have a role in the organisation: member (start, continue and
inspect tasks and sessions), admin (and curate images, profiles, secrets,
integrations, automations, members and keys) or owner (and make owners).
You may give a role up to your own.`)
	cmd.Aliases = []string{"members"}
	cmd.AddCommand(a.memberListCmd(), a.memberAddCmd(), a.memberSetCmd(), a.memberGroupsCmd(), a.memberRemoveCmd())
	return cmd
}

func (a peopleCmds) memberListCmd() *cobra.Command {
	return &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List members", Example: "  engrams member list --json",
		Long: "List the organisation's members: user id, email, name, role, groups and when they were added.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ms, err := c.People().Members(cmd.Context())
			if err != nil {
				return fmt.Errorf("list members: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ms, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "USER", "EMAIL", "NAME", "ROLE", "GROUPS", "ADDED")
			for _, m := range ms {
				row(tw, m.UserID, orDash(m.Email), orDash(m.Name), m.Role, orDash(strings.Join(m.Groups, ",")), a.when(m.AddedAt))
			}
			return tw.Flush()
		},
	}
}

func (a peopleCmds) memberAddCmd() *cobra.Command {
	var role, name string
	cmd := &cobra.Command{
		Use: "add EMAIL", Short: "Add a person to the organisation",
		Long: `Add a person by email, with a role up to yours. They are made a user
when new; they sign in with the key they make or are given.`,
		Example: "  engrams member add ada@example.com --role admin --name Ada",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			m, err := c.People().AddMember(cmd.Context(), apiv1.AddMemberRequest{Email: args[0], Name: name, Role: role})
			if err != nil {
				return fmt.Errorf("add member %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "added %s as %s (user %s)\n", m.Email, m.Role, m.UserID)
			return nil
		},
	}
	cmd.Flags().StringVar(&role, "role", apiv1.RoleMember, "member, admin or owner")
	cmd.Flags().StringVar(&name, "name", "", "their name, for lists")
	return cmd
}

func (a peopleCmds) memberSetCmd() *cobra.Command {
	return &cobra.Command{
		Use: "set-role USER ROLE", Short: "Change a member's role (only owners change owners)",
		Long: `Change a member's role, up to yours. Their personal keys follow at once:
a key's role never exceeds its owner's. The last owner stays one.`,
		Example: "  engrams member set-role 0193… admin",
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			m, err := c.People().SetRole(cmd.Context(), args[0], args[1])
			if err != nil {
				return fmt.Errorf("set the role of %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is now %s\n", orDash(m.Email), m.Role)
			return nil
		},
	}
}

func (a peopleCmds) memberRemoveCmd() *cobra.Command {
	return &cobra.Command{
		Use: "remove USER", Short: "Remove a member; their personal keys stop at once",
		Long: `Remove a member from the organisation. Their personal keys in it are
revoked in the same transaction; service keys they made stay until an
admin revokes them. The last owner cannot be removed.`,
		Example: "  engrams member remove 0193…",
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.People().RemoveMember(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("remove member %s: %w", args[0], err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), "removed", args[0])
			return nil
		},
	}
}

func (a peopleCmds) auditCmd() *cobra.Command {
	var limit int
	var cursor string
	var fleet bool
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read the audit log, newest first (admins; --fleet for fleet operators)",
		Long: `Every admin action and key use that matters (secret created, profile
changed, key made or revoked, member added, host disabled, integration
changed): who, what, when, from where. A page at a time: the last line
says how to read the next.`,
		Example: "  engrams audit\n  engrams audit --limit 200 --json\n  engrams audit --fleet",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 || limit > apiv1.MaxPageLimit {
				return usageError{fmt.Errorf("--limit %d: want 1 to %d", limit, apiv1.MaxPageLimit)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			page, err := c.People().Audit(cmd.Context(), limit, cursor, fleet)
			if err != nil {
				return fmt.Errorf("read the audit log: %w", err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), page)
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "WHEN", "ACTOR", "ACTION", "TARGET", "STATUS", "FROM")
			for _, e := range page.Items {
				row(tw, a.when(e.At), orDash(e.ActorName)+" ("+e.ActorKind+")", e.Action, orDash(e.TargetID), e.Status, orDash(e.Remote))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "more: engrams audit --cursor %s\n", page.NextCursor)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 50, "events per page")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the page after this cursor (printed after a full page)")
	cmd.Flags().BoolVar(&fleet, "fleet", false, "the hosts' log (fleet operators)")
	return cmd
}

func (a peopleCmds) identityCmd() *cobra.Command {
	cmd := group("identity", "Your accounts in Slack, GitHub and Linear: who your mentions act as",
		`A Slack mention or an @engrams comment on a GitHub pull request starts a
task only for an engrams member, as them; a pull request or Linear issue of
yours starts its automation's task as yours. Your Slack account is yours
when Slack has confirmed the same email as your engrams account's;
otherwise, and for GitHub and Linear, link it: "engrams identity link
KIND" gives a code to say there, once, within 15 minutes.`)
	cmd.Aliases = []string{"identities"}
	cmd.AddCommand(a.identityListCmd(), a.identityLinkCmd(), a.identityUnlinkCmd())
	return cmd
}

func (a peopleCmds) identityListCmd() *cobra.Command {
	return &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "List your linked accounts", Example: "  engrams identity list --json",
		Long: "List your accounts in the integrations: kind, account, how it was mapped (email or link) and when.",
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ids, err := c.People().Identities(cmd.Context())
			if err != nil {
				return fmt.Errorf("list identities: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ids, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "KIND", "ACCOUNT", "HOW", "SINCE")
			for _, id := range ids {
				row(tw, id.Kind, id.Account, id.How, a.when(id.CreatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a peopleCmds) identityLinkCmd() *cobra.Command {
	return &cobra.Command{
		Use: "link slack|linear|github [GITHUB-LOGIN]", Short: "Get a code that links your Slack, GitHub or Linear account to you",
		Long: `Print a single-use code to say, within 15 minutes, from the account
to link: in Slack, mention the engrams app with "link CODE"; in GitHub or
Linear, comment "@engrams link CODE" (GitHub: on a pull request or issue of
a repository engrams serves; Linear: on any issue). The account that says
it acts as you from then on: its mentions start tasks that are yours.

A GitHub comment is public, so a GitHub code is made for the login you
name: said by any other account it does nothing.`,
		Example: "  engrams identity link slack\n  engrams identity link github octocat",
		Args:    usageArgs(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			req := apiv1.LinkIdentityRequest{Kind: args[0]}
			if len(args) == 2 {
				req.Account = args[1]
			}
			l, err := c.People().LinkAccount(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("link %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), l)
			}
			fmt.Fprintln(cmd.OutOrStdout(), l.Code)
			fmt.Fprintln(cmd.ErrOrStderr(), l.Say)
			return nil
		},
	}
}

func (a peopleCmds) identityUnlinkCmd() *cobra.Command {
	return &cobra.Command{
		Use: "unlink KIND ACCOUNT", Short: "Stop an account acting as you",
		Long:    "Unlink one of your accounts (see engrams identity list): it no longer acts as you.",
		Example: "  engrams identity unlink slack T0123:U0456",
		Args:    usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.People().UnlinkIdentity(cmd.Context(), args[0], args[1]); err != nil {
				return fmt.Errorf("unlink %s account %s: %w", args[0], args[1], err)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "unlinked %s account %s\n", args[0], args[1])
			return nil
		},
	}
}

// memberGroupsCmd replaces the groups a member is in.
func (a peopleCmds) memberGroupsCmd() *cobra.Command {
	var none bool
	cmd := &cobra.Command{
		Use: "set-groups USER GROUP...", Short: "Say which groups a member is in (profile grants name groups)",
		Long: `Replace the groups a member is in; --none leaves them in none. Profiles
granted to a group (` + "`engrams profile grant NAME group:GROUP`" + `) are then theirs to
use. Where the identity provider sends a "groups" claim, each sign-in
replaces what is set here with the provider's.`,
		Example: "  engrams member set-groups 0193… backend oncall\n  engrams member set-groups 0193… --none",
		Args:    usageArgs(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			groups := args[1:]
			if none == (len(groups) > 0) {
				return usageError{errors.New("give the groups, or --none for none")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			m, err := c.People().SetGroups(cmd.Context(), args[0], groups)
			if err != nil {
				return fmt.Errorf("set the groups of %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), m)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s is in: %s\n", orDash(m.Email), orDash(strings.Join(m.Groups, ", ")))
			return nil
		},
	}
	cmd.Flags().BoolVar(&none, "none", false, "leave them in no group")
	return cmd
}
