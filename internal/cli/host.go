package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
)

func (a hostCmds) hostCmd() *cobra.Command {
	cmd := group("host", "List, register, drain, disable and delete hosts",
		`A host is a Linux machine that runs sessions' microVMs. It dials the
coordinator (it never needs an inbound port), reports its capacity and the
VM backend it uses, and runs the sessions placed on it.`)
	cmd.Aliases = []string{"hosts"}
	cmd.Annotations = map[string]string{annNotFound: "list hosts with `engrams host list`"}
	cmd.AddCommand(a.hostListCmd(), a.hostGetCmd(), a.hostCreateCmd(), a.hostDrainCmd(), a.hostUndrainCmd(),
		a.hostDisableCmd(), a.hostEnableCmd(), a.hostDeleteCmd())
	return cmd
}

// sessionsUsed shows running sessions, and the limit when there is one.
func sessionsUsed(c apiv1.Capacity) string {
	if c.MaxSessions <= 0 {
		return fmt.Sprintf("%d", c.Sessions)
	}
	return fmt.Sprintf("%d/%d", c.Sessions, c.MaxSessions)
}

func (a hostCmds) hostListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List hosts",
		Long: `List hosts with their state (new, ready, draining, lost, or disabled by an
admin), the VM backend and acceleration they use, sessions running out of
the most they take, and when they last reported in. Deleted hosts are not
listed.`,
		Example: `  engrams host list
  engrams host list --json | jq '.items[] | select(.state == "ready") | .id'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			hosts, err := c.Hosts().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list hosts: %w", err)
			}
			out := a.termOut(cmd.OutOrStdout()) // a host reports its own facts
			if a.jsonOut {
				return printList(out, hosts, "")
			}
			tw := newTable(out)
			row(tw, "ID", "NAME", "STATE", "BACKEND", "ACCEL", "SESSIONS", "LAST HEARTBEAT")
			for _, h := range hosts {
				row(tw, h.ID, h.Name, h.State, h.Facts.Backend.Name, h.Facts.Backend.Acceleration,
					sessionsUsed(h.Capacity), a.ago(h.LastHeartbeat))
			}
			return tw.Flush()
		},
	}
}

func (a hostCmds) hostGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME|ID",
		Aliases: []string{"show"},
		Short:   "Show a host, its capacity and why it uses its VM backend",
		Long: `Show a host: its facts (CPU, kernel, agent version), capacity and use, the
snapshots whose chunks it caches (resumes of those prefer it), the VM
backend it runs sessions with and why that one was chosen, and every
backend it considered with the reason it is or is not usable.`,
		Example: `  engrams host get h1
  engrams host get --json h1 | jq .facts.backend`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := c.Hosts().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get host %s: %w", args[0], err)
			}
			out := a.termOut(cmd.OutOrStdout()) // a host reports its own facts
			if a.jsonOut {
				return printJSON(out, h)
			}
			return a.printHost(out, h)
		},
	}
}

// cachedSnapshots lists the first few snapshots a host caches.
func cachedSnapshots(ids []string) string {
	const show = 5
	switch {
	case len(ids) == 0:
		return ""
	case len(ids) <= show:
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:show], ", "), len(ids)-show)
}

func isolation(b apiv1.BackendFacts) string {
	if b.Isolation {
		return "isolated"
	}
	return "NOT isolated"
}

func (a hostCmds) printHost(out io.Writer, h apiv1.Host) error {
	f, cp, b := h.Facts, h.Capacity, h.Facts.Backend
	backend := ""
	if b.Name != "" {
		backend = fmt.Sprintf("%s %s (%s, %s)", b.Name, b.Version, b.Acceleration, isolation(b))
	}
	tw := newTable(out)
	for _, kv := range [][2]any{
		{"ID", h.ID},
		{"Name", h.Name},
		{"State", h.State},
		{"Hostname", f.Hostname},
		{"Arch", f.Arch},
		{"CPU", f.CPUModel},
		{"Kernel", f.Kernel},
		{"Agent", f.AgentVersion},
		{"Backend", backend},
		{"Backend reason", b.Reason},
		{"Memory", fmt.Sprintf("%d/%d MiB used", cp.UsedMemoryMiB, cp.MemoryMiB)},
		{"vCPUs", fmt.Sprintf("%d/%d used", cp.UsedVCPUs, cp.VCPUs)},
		{"Sessions", sessionsUsed(cp)},
		{"Cached snapshots", cachedSnapshots(cp.CachedSnapshots)},
		{"Replica", h.ReplicaID},
		{"Connected from", h.ConnectedFrom},
		{"Last heartbeat", a.ago(h.LastHeartbeat)},
		{"Created", a.when(h.CreatedAt)},
	} {
		row(tw, fmt.Sprint(kv[0])+":", kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(f.Available) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nBackends considered:")
	tw = newTable(out)
	row(tw, "NAME", "VERSION", "ACCEL", "ISOLATION", "USABLE", "REASON")
	for _, b := range f.Available {
		row(tw, b.Name, b.Version, b.Acceleration, b.Isolation, b.Usable, b.Reason)
	}
	return tw.Flush()
}

func (a hostCmds) hostDisableCmd() *cobra.Command {
	return a.hostAccessCmd("disable", "Take a host out of service now",
		`Disable a host: its link to the coordinator is closed within seconds and
refused until it is enabled again, nothing is placed on it, the model
gateway refuses it, and its sessions are recovered at once: each becomes
idle at its last snapshot (resumed elsewhere on its next use), or dead when
it has none. Its VMs stop on the host once its lease runs out.`,
		"  engrams host disable kvm-1",
		func(c hostAccess, ctx context.Context, host string) (apiv1.Host, error) { return c.Disable(ctx, host) },
		"host %s (%s) is disabled: its link is closed and its sessions were handed to recovery\n")
}

func (a hostCmds) hostEnableCmd() *cobra.Command {
	return a.hostAccessCmd("enable", "Let a disabled host work again",
		`Enable a disabled host: once its agent reconnects (it retries on its own)
and registers, sessions may be placed on it again.`,
		"  engrams host enable kvm-1",
		func(c hostAccess, ctx context.Context, host string) (apiv1.Host, error) { return c.Enable(ctx, host) },
		"host %s (%s) is enabled: it takes sessions again once its agent reconnects\n")
}

func (a hostCmds) hostDeleteCmd() *cobra.Command {
	return a.hostAccessCmd("delete", "Delete a host, revoking its token",
		`Delete a host: as disable, and its tokens are revoked, so its agent can
never connect again, and its name is free for a new host. Its sessions are
recovered as disable does. The record stays (engrams host get ID shows it,
deleted) for the sessions and snapshots that name it.`,
		"  engrams host delete kvm-1",
		func(c hostAccess, ctx context.Context, host string) (apiv1.Host, error) { return c.Delete(ctx, host) },
		"host %s (%s) is deleted: its token is revoked, its link closed and its sessions were handed to recovery\n")
}

// hostAccess is the part of the hosts client the access commands use.
type hostAccess interface {
	Disable(ctx context.Context, host string) (apiv1.Host, error)
	Enable(ctx context.Context, host string) (apiv1.Host, error)
	Delete(ctx context.Context, host string) (apiv1.Host, error)
}

// hostAccessCmd is one of disable, enable and delete: it calls do on the
// host named by its argument and prints done with the host's name and id.
func (a hostCmds) hostAccessCmd(verb, short, long, example string,
	do func(c hostAccess, ctx context.Context, host string) (apiv1.Host, error), done string) *cobra.Command {
	return &cobra.Command{
		Use:     verb + " NAME|ID",
		Short:   short,
		Long:    long,
		Example: example,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := do(c.Hosts(), cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%s host %s: %w", verb, args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), h)
			}
			fmt.Fprintf(cmd.OutOrStdout(), done, h.Name, h.ID)
			return nil
		},
	}
}

func (a hostCmds) hostCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create NAME",
		Short: "Register a host and print its token (shown only once)",
		Long: `Register a host name and mint the token its host agent authenticates with.
The token is printed only this once, together with the command that starts
the host agent on the KVM machine.`,
		Example: `  engrams host create kvm-1`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Hosts().Create(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("create host %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), `Host %s (%s) registered.
Its token, shown only this once:

  %s

Start the host agent on the machine (it needs /dev/kvm or QEMU) with:

  engrams host run --coordinator %s --name %s --token %s
`, r.Host.Name, r.Host.ID, r.Token, c.BaseURL(), r.Host.Name, r.Token)
			return nil
		},
	}
}

func (a hostCmds) hostUndrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "undrain ID",
		Short: "Place sessions on a drained host again",
		Long: `Undo a drain: the host takes new sessions again (a host that is new or lost
once it connects).`,
		Example: `  engrams host undrain h1`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := c.Hosts().Undrain(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("undrain host %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), h)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s is %s: it takes new sessions again\n", h.ID, h.State)
			return nil
		},
	}
}

func (a hostCmds) hostDrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "drain ID",
		Short: "Stop placing sessions on a host",
		Long: `Drain a host: new sessions and resumes go to other hosts; sessions already
on it keep running. The drain lasts across reconnects (until "engrams host
undrain"); a host that is new or lost drains as soon as it connects.`,
		Example: `  engrams host drain h1`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := c.Hosts().Drain(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("drain host %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), h)
			}
			if h.State != "draining" { // new or lost: it drains once it connects
				fmt.Fprintf(cmd.OutOrStdout(), "host %s is %s: it will take no new sessions when it connects\n", h.ID, h.State)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "host %s is draining: new sessions go elsewhere, its %d sessions keep running\n",
				h.ID, h.Capacity.Sessions)
			return nil
		},
	}
}
