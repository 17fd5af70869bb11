package cli

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/guestapi"
)

func (a harnessCmds) harnessCmd() *cobra.Command {
	cmd := group("harness", "Register agent harnesses: Claude Code, Codex, or your own",
		`A harness is the agent program a task runs (Claude Code, Codex, or your own),
packed into a read-only bundle that hosts attach to the task's VM at
/.engrams-harness. Register the built-in ones with `+"`engrams harness build`"+`
(from their npm packages) and your own with `+"`engrams harness add DIR`"+`;
profiles and sessions then name one as NAME (the newest) or NAME@VERSION.
A registered version never changes.`)
	cmd.Aliases = []string{"harnesses"}
	cmd.Annotations = map[string]string{
		annNotFound: "list registered harnesses with `engrams harness list`",
		annConflict: "that version is registered with another bundle: a registered version never changes, so give yours another version",
	}
	cmd.AddCommand(a.harnessBuildCmd(), a.harnessAddCmd(), a.harnessListCmd(), a.harnessShowCmd(), a.harnessDeleteCmd())
	return cmd
}

func (a harnessCmds) harnessBuildCmd() *cobra.Command {
	var req apiv1.BuildHarnessRequest
	cmd := &cobra.Command{
		Use:   "build NAME",
		Short: "Build and register a built-in harness (claude-code, codex, shell)",
		Long: `Build a built-in harness on the server and register it: claude-code and
codex come from their npm packages (downloaded once, checked against the
registry's integrity and cached), shell is engrams's own test harness.
--version takes an exact version or an npm dist-tag (default latest); an
exact version already registered answers at once. A first build can take
minutes. claude-code ships builds for glibc (default) and musl (--libc
musl, for Alpine-like images), registered as VERSION-musl.`,
		Example: `  engrams harness build claude-code
  engrams harness build codex --version 0.171.0
  engrams harness build claude-code --version 2.1.332 --libc musl
  engrams harness build shell`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Name = args[0]
			c, err := a.client()
			if err != nil {
				return err
			}
			label := req.Name + "@" + firstNonEmpty(req.Version, "latest")
			if req.Libc != "" {
				label += " (" + req.Libc + ")"
			}
			stop := a.busy(cmd.ErrOrStderr(), "building "+label)
			h, err := c.Harnesses().Build(cmd.Context(), req)
			stop()
			if err != nil {
				return fmt.Errorf("build harness %s: %w", label, err)
			}
			return a.printRegistered(cmd, h)
		},
	}
	cmd.Flags().StringVar(&req.Version, "version", "", "exact `VERSION` or npm dist-tag (default latest)")
	cmd.Flags().StringVar(&req.Libc, "libc", "", "claude-code's build: glibc (default) or musl")
	return cmd
}

func (a harnessCmds) printRegistered(cmd *cobra.Command, h apiv1.Harness) error {
	if a.jsonOut {
		return printJSON(cmd.OutOrStdout(), h)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "harness %s@%s is registered (%s, %s, %s)\nname it in a profile with --harness %s@%s\n",
		h.Name, h.Version, shortDigest(h.Digest), humanBytes(h.SizeBytes), builtinWord(h.Builtin), h.Name, h.Version)
	return err
}

func builtinWord(b bool) string {
	if b {
		return "built-in"
	}
	return "custom"
}

// busy shows that a long call is running: on a terminal a spinner with the
// time so far until stop is called, else one line.
func (a harnessCmds) busy(w io.Writer, what string) (stop func()) {
	if _, tty := a.terminalFD(w); !tty {
		fmt.Fprintf(w, "%s …\n", what)
		return func() {}
	}
	start := a.opts.Now()
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for frame := 0; ; frame++ {
			fmt.Fprintf(w, "\r%s … %s %s\x1b[K", what, spinner[frame%len(spinner)], a.opts.Now().Sub(start).Round(time.Second))
			select {
			case <-done:
				fmt.Fprintf(w, "\r%s … %s\x1b[K\n", what, a.opts.Now().Sub(start).Round(time.Second))
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

func (a harnessCmds) harnessAddCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "add DIR",
		Short: "Register your own harness from a directory",
		Long: `Register a custom harness: DIR holds harness.json (name, version, entrypoint,
protocol, models, modes, credentials, hosts, requires) at its root and the
files the entrypoint needs. The CLI packs DIR (files, directories and
symlinks that stay inside it) and uploads it; the server checks the
descriptor and the tree, packs the bundle and registers it. Names of the
built-in harnesses are taken; a registered version never changes.`,
		Example: `  engrams harness add ./my-agent`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			d, files, size, err := scanHarnessDir(dir)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTarGz(pw, dir)) }()
			stop := a.busy(cmd.ErrOrStderr(), fmt.Sprintf("adding %s@%s from %s (%d files, %s)", d.Name, d.Version, dir, files, humanBytes(size)))
			h, err := c.Harnesses().Add(cmd.Context(), pr)
			stop()
			pr.Close()
			if err != nil {
				return fmt.Errorf("add harness %s@%s: %w", d.Name, d.Version, err)
			}
			return a.printRegistered(cmd, h)
		},
	}
}

// scanHarnessDir checks DIR before it is uploaded: its descriptor, and
// only files, directories and symlinks staying inside it. It returns the
// descriptor and how many files and bytes it holds.
func scanHarnessDir(dir string) (guestapi.HarnessDescriptor, int, int64, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, 0, 0, usageError{fmt.Errorf("harness directory: %w", err)}
	}
	if !st.IsDir() {
		return guestapi.HarnessDescriptor{}, 0, 0, usageError{fmt.Errorf("%s is not a directory", dir)}
	}
	d, err := guestapi.LoadHarnessDescriptor(dir)
	if err != nil {
		return guestapi.HarnessDescriptor{}, 0, 0, err
	}
	files, size := 0, int64(0)
	err = walkHarnessDir(dir, func(rel string, info fs.FileInfo, _ string) error {
		if info.Mode().IsRegular() {
			files++
			size += info.Size()
		}
		return nil
	})
	return d, files, size, err
}

// walkHarnessDir calls fn for every entry under dir (not dir itself) with
// its slash path, refusing special files and symlinks leaving dir.
func walkHarnessDir(dir string, fn func(rel string, info fs.FileInfo, link string) error) error {
	return filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := e.Info()
		if err != nil {
			return err
		}
		link := ""
		switch mode := info.Mode(); {
		case mode&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
			target := filepath.ToSlash(link)
			if res := path.Join(path.Dir(rel), target); path.IsAbs(target) || res == ".." || strings.HasPrefix(res, "../") {
				return fmt.Errorf("%s is a symlink to %s, outside %s: a harness holds only what is inside its directory", p, link, dir)
			}
		case !mode.IsRegular() && !mode.IsDir():
			return fmt.Errorf("%s is a %v: a harness holds only files, directories and symlinks", p, mode.Type())
		}
		return fn(rel, info, link)
	})
}

// writeTarGz writes dir as a gzip-compressed tar.
func writeTarGz(w io.Writer, dir string) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err := walkHarnessDir(dir, func(rel string, info fs.FileInfo, link string) error {
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = rel, 0, 0, "", ""
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("pack %s: %w", rel, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

func (a harnessCmds) harnessListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List registered harnesses",
		Long:    "List registered harnesses by name, oldest version first.",
		Example: `  engrams harness list
  engrams harness list --json | jq -r '.items[] | .name + "@" + .version'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			hs, err := c.Harnesses().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list harnesses: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), hs, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "NAME", "VERSION", "PROTOCOL", "LIBC", "KIND", "SIZE", "DIGEST", "CREATED")
			for _, h := range hs {
				row(tw, h.Name, h.Version, h.Protocol, h.Requires.Libc, builtinWord(h.Builtin), humanBytes(h.SizeBytes), shortDigest(h.Digest), a.when(h.CreatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a harnessCmds) harnessShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME[@VERSION]",
		Aliases: []string{"show"},
		Short:   "Show a harness: models, modes, credentials, hosts, requirements",
		Long: `Show a registered harness (the newest version unless @VERSION is given):
its protocol and entrypoint, the models and modes a profile may pick (the
first is the default; * admits any model), the credentials it needs (by
kind; a profile names a secret of each), the hosts it talks to and what it
needs of an image.`,
		Example: `  engrams harness get claude-code
  engrams harness get codex@0.171.0 --json`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, version, _ := strings.Cut(args[0], "@")
			c, err := a.client()
			if err != nil {
				return err
			}
			h, err := c.Harnesses().Get(cmd.Context(), name, version)
			if err != nil {
				return fmt.Errorf("show harness %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), h)
			}
			return a.printHarness(cmd.OutOrStdout(), h)
		},
	}
}

func (a harnessCmds) printHarness(w io.Writer, h apiv1.Harness) error {
	creds := make([]string, 0, len(h.Credentials))
	for _, c := range h.Credentials {
		s := c.Kind + " (in " + c.Env
		if c.BaseURLEnv != "" {
			s += "; base URL in " + c.BaseURLEnv
		}
		creds = append(creds, s+")")
	}
	tw := newTable(w)
	for _, kv := range [][2]any{
		{"Name", h.Name},
		{"Version", h.Version},
		{"ID", h.ID},
		{"Kind", builtinWord(h.Builtin)},
		{"Protocol", h.Protocol},
		{"Entrypoint", strings.Join(h.Entrypoint, " ")},
		{"Models", choices(h.Models)},
		{"Modes", choices(h.Modes)},
		{"Credentials", strings.Join(creds, ", ")},
		{"Hosts", strings.Join(h.Hosts, ", ")},
		{"Requires", requires(h.Requires)},
		{"Digest", h.Digest},
		{"Size", humanBytes(h.SizeBytes)},
		{"Created", a.when(h.CreatedAt)},
	} {
		row(tw, fmt.Sprint(kv[0])+":", kv[1])
	}
	return tw.Flush()
}

// choices shows a model or mode list: the first marked the default, "*"
// as "any other".
func choices(list []string) string {
	out := make([]string, 0, len(list))
	for i, s := range list {
		switch {
		case s == guestapi.AnyModel:
			out = append(out, "any other (*)")
		case i == 0:
			out = append(out, s+" (default)")
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

func requires(r apiv1.HarnessRequires) string {
	var s string
	switch {
	case r.Libc == guestapi.LibcNone:
		s = "nothing (static programs: any image)"
	case r.GlibcMin != "":
		s = r.Libc + " " + r.GlibcMin + " or newer"
	default:
		s = r.Libc
	}
	if len(r.Libs) > 0 {
		s += "; libraries " + strings.Join(r.Libs, ", ")
	}
	return s
}

// humanBytes shows a size in the largest binary unit under it: "180.2 MiB".
func humanBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f, i = f/1024, i+1
	}
	return fmt.Sprintf("%.1f %s", f, units[i])
}

func (a harnessCmds) harnessDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME[@VERSION]",
		Short: "Delete a harness version",
		Long: `Delete a registered harness (the newest version unless @VERSION is given):
profiles and sessions can no longer name it, while sessions made with it keep
it (its bundle stays stored). Profiles naming it show a problem until
another version is registered. Building or adding the same bundle again
brings it back.`,
		Example: `  engrams harness delete my-agent@0.3.0`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			name, version, _ := strings.Cut(args[0], "@")
			h, err := c.Harnesses().Delete(cmd.Context(), name, version)
			if err != nil {
				return fmt.Errorf("delete harness %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), h)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "deleted harness %s@%s (%s)\n", h.Name, h.Version, h.ID)
			return nil
		},
	}
}
