package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

func (a sessionCmds) sessionEgressCmd() *cobra.Command {
	var (
		follow bool
		limit  int
	)
	cmd := &cobra.Command{
		Use:   "egress ID",
		Short: "Print what a session's guest tried to reach, and what was allowed",
		Long: `Print a session's egress log, newest first: every DNS query its guest sent to
the session's filtering resolver, every connection it opened through the
egress proxy (tls: passed through by its SNI; http: plain HTTP; connect: an
HTTP CONNECT tunnel; tcp: anything else, or refused before it said where to)
and every flow its machine's network dropped (udp: UDP but DNS, such as QUIC
or NTP; icmp: ping and other ICMP; tcp or udp over IPv6; ip: other IP
protocols), with the protocol, the address the guest dialled, the name it
claimed (as it sent it), the port, the verdict, the bytes sent up and received
down, and why. A dropped line counts events that were not kept (over the
session's rate on its host or at the coordinator, or lost by the host). A
session keeps its newest 10,000 events.

Host names and reasons are what the guest asked for: on a terminal they are
shown without control characters. --json prints one JSON object per event.
With --follow the command then prints new events as they arrive (oldest
first) until the session ends or you press Ctrl-C.`,
		Example: `  engrams session egress 0193a1b2-...
  engrams session egress --follow 0193a1b2-...
  engrams session egress --json --limit 1000 0193a1b2-... | jq 'select(.verdict == "deny") | .host'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 || limit > apiv1.MaxEgressPage {
				return usageError{fmt.Errorf("--limit %d: want 1 to %d", limit, apiv1.MaxEgressPage)}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.Sessions().Egress(cmd.Context(), args[0], client.EgressQuery{Limit: limit})
			if err != nil {
				return fmt.Errorf("egress of session %s: %w", args[0], err)
			}
			p := egressPrinter{app: a.app, w: a.termOut(cmd.OutOrStdout())}
			if err := p.header(); err != nil {
				return err
			}
			for _, e := range l.Events {
				if err := p.event(e); err != nil {
					return err
				}
			}
			if !follow {
				return nil
			}
			var after int64
			if len(l.Events) > 0 {
				after = l.Events[0].Seq
			}
			err = c.Sessions().FollowEgress(cmd.Context(), args[0], after, a.opts.PollInterval, p.event)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("egress of session %s: %w", args[0], err)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "then print new events as they arrive")
	cmd.Flags().IntVarP(&limit, "limit", "n", 50, fmt.Sprintf("print at most this many of the newest events (1 to %d)", apiv1.MaxEgressPage))
	return cmd
}

// egressPrinter prints egress events as fixed-width lines (so followed
// ones line up with the first page) or, with --json, one object each.
type egressPrinter struct {
	*app
	w io.Writer // through termSafe on a terminal
}

// egressLine's ADDR column fits an IPv4 address; a longer IPv6 one
// pushes the rest of its line right, as a long host name does.
const egressLine = "%-19s  %-7s  %-6s  %-15s  %-32s  %5s  %-7s  %9s  %9s  %s\n"

func (p egressPrinter) header() error {
	if p.jsonOut {
		return nil
	}
	_, err := fmt.Fprintf(p.w, egressLine, "TIME", "KIND", "PROTO", "ADDR", "HOST", "PORT", "VERDICT", "UP", "DOWN", "REASON")
	return err
}

func (p egressPrinter) event(e apiv1.EgressEvent) error {
	if p.jsonOut {
		b, err := json.Marshal(e)
		if err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		_, err = p.w.Write(append(b, '\n'))
		return err
	}
	port, verdict, up, down := "-", orDash(e.Verdict), humanBytes(e.BytesUp), humanBytes(e.BytesDown)
	if e.Port > 0 {
		port = strconv.Itoa(e.Port)
	}
	if e.Kind == apiv1.EgressDropped {
		up, down = "-", "-"
	}
	// One line per event: the guest's tabs and newlines would break the
	// table; what else it sent termSafe shows inert on a terminal.
	_, err := fmt.Fprintf(p.w, egressLine, p.when(e.Time), e.Kind, orDash(e.Proto), orDash(e.Addr), orDash(oneLine(e.Host)), port, verdict, up, down, oneLine(e.Reason))
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s with its tabs and line breaks as spaces.
func oneLine(s string) string {
	return strings.NewReplacer("\t", " ", "\n", " ", "\v", " ", "\f", " ", "\u2028", " ", "\u2029", " ").Replace(s)
}
