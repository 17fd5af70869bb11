package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/client"
)

// lister names the objects of one command group, for completion: each
// candidate with a short description.
type lister func(ctx context.Context, c *client.Client) ([][2]string, error)

// listers are the groups whose commands take an object as their first
// argument (`VERB ID` or `VERB NAME`).
func listers() map[string]lister {
	return map[string]lister{
		"session": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			ss, err := c.Sessions().List(ctx, client.SessionFilter{})
			out := make([][2]string, 0, len(ss))
			for _, s := range ss {
				out = append(out, [2]string{s.ID, string(s.State)})
			}
			return out, err
		},
		"task": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			ts, err := c.Tasks().List(ctx, "", "")
			out := make([][2]string, 0, len(ts))
			for _, t := range ts {
				out = append(out, [2]string{t.ID, t.State + ": " + t.Title})
			}
			return out, err
		},
		"profile": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			ps, err := c.Profiles().List(ctx)
			out := make([][2]string, 0, len(ps))
			for _, p := range ps {
				out = append(out, [2]string{p.Name, p.Spec.Image + " + " + p.Spec.Harness})
			}
			return out, err
		},
		"image": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			is, err := c.Images().List(ctx, false)
			out := make([][2]string, 0, len(is))
			for _, i := range is {
				out = append(out, [2]string{i.Name, i.State + ": " + i.Ref})
			}
			return out, err
		},
		"host": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			hs, err := c.Hosts().List(ctx)
			out := make([][2]string, 0, len(hs))
			for _, h := range hs {
				out = append(out, [2]string{h.Name, h.State})
			}
			return out, err
		},
		"secret": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			ss, err := c.Secrets().List(ctx)
			out := make([][2]string, 0, len(ss))
			for _, s := range ss {
				out = append(out, [2]string{s.Name, s.Kind})
			}
			return out, err
		},
		"harness": func(ctx context.Context, c *client.Client) ([][2]string, error) {
			hs, err := c.Harnesses().List(ctx)
			out := make([][2]string, 0, len(hs))
			for _, h := range hs {
				out = append(out, [2]string{h.Name + "@" + h.Version, strings.Join(h.Models, ",")})
			}
			return out, err
		},
	}
}

// addCompletions gives every `VERB ID|NAME` command of the groups in
// listers a completion of its first argument from the server (in a shell
// with `engrams completion` loaded, Tab after `engrams session exec `
// lists the sessions). A server it cannot reach completes nothing.
func (a *app) addCompletions(root *cobra.Command) {
	ls := listers()
	for _, g := range root.Commands() {
		list, ok := ls[g.Name()]
		if !ok {
			continue
		}
		for _, cmd := range g.Commands() {
			fields := strings.Fields(cmd.Use)
			if cmd.ValidArgsFunction != nil || len(fields) < 2 || !takesObject(fields[1]) {
				continue
			}
			cmd.ValidArgsFunction = a.completer(list)
		}
	}
}

func takesObject(arg string) bool {
	return strings.HasPrefix(arg, "ID") || strings.HasPrefix(arg, "NAME")
}

func (a *app) completer(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := a.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
		defer cancel()
		items, _ := list(ctx, c)
		var out []cobra.Completion
		for _, it := range items {
			if strings.HasPrefix(it[0], prefix) {
				out = append(out, cobra.CompletionWithDesc(menuText(it[0]), menuText(it[1])))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// menuText is server text fit for a completion menu: no control
// characters (terminal escapes), tabs or line breaks.
func menuText(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, s)
}
