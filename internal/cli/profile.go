package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/engrams/engrams/api/apiv1"
)

func (a profileCmds) profileCmd() *cobra.Command {
	cmd := group("profile", "Curate what agent tasks get: image, harness, model, repos, credentials",
		`A profile is the recipe a task starts from: the image its VM starts from,
the harness (agent) and its model and mode, the repositories cloned for it,
its environment, the credentials it may use and the skills and apps it has.
Everything it names is checked when it is saved, and `+"`engrams profile get`"+`
prints the grant receipt: what a task started from it can do and reach,
and how each credential is delivered.`)
	cmd.Aliases = []string{"profiles"}
	cmd.Annotations = map[string]string{
		annNotFound: "list profiles with `engrams profile list`",
		annConflict: "the profile changed or its name is taken: check it with `engrams profile get NAME`",
	}
	cmd.AddCommand(a.profileCreateCmd(), a.profileListCmd(), a.profileShowCmd(), a.profileEditCmd(), a.profileGrantCmd(false), a.profileGrantCmd(true),
		a.profileDeleteCmd())
	return cmd
}

// profileFlags are the spec flags of `profile create` and `profile edit`.
type profileFlags struct {
	image, harness, model, mode, idle, fromFile                           string
	repos, repoCreds, repoPush, repoAPI, env, egress, creds, skills, apps []string
}

func (f *profileFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.image, "image", "", "the enabled image `NAME` tasks start from")
	fl.StringVar(&f.harness, "harness", "", "the `HARNESS`: NAME (the newest registered) or NAME@VERSION")
	fl.StringVar(&f.model, "model", "", "the `MODEL` (default: the harness's first; see engrams harness get)")
	fl.StringVar(&f.mode, "mode", "", "the harness's `MODE` (default: its first)")
	fl.StringArrayVar(&f.repos, "repo", nil, "a repository `URL[#REF][=PATH]` to clone (repeatable; PATH defaults to the URL's last element without .git)")
	fl.StringArrayVar(&f.repoCreds, "repo-credential", nil, "`PATH=SECRET`: clone the repo at PATH with this git_https or github_app secret (repeatable)")
	fl.StringArrayVar(&f.repoPush, "repo-push", nil, "`PATH[=false]`: let the guest push to the repo at PATH through the credential broker (repeatable; default: fetch only)")
	fl.StringArrayVar(&f.repoAPI, "repo-api", nil, "`PATH[=false]`: let the guest call the host's REST API for the repo at PATH through the broker; writes need --repo-push too (repeatable)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable `KEY=VALUE`, not secret (repeatable)")
	fl.StringArrayVar(&f.egress, "egress", nil, "`HOST[:PORT]` or *.SUFFIX tasks' guests may reach (repeatable; ports 80 and 443 when none is given; enforced on QEMU hosts)")
	fl.StringArrayVar(&f.creds, "credential", nil, "`SECRET` holding a model key the harness needs (repeatable)")
	fl.StringArrayVar(&f.skills, "skill", nil, "skill bundle `NAME[@VERSION]` (repeatable; recorded, not mounted yet)")
	fl.StringArrayVar(&f.apps, "app", nil, "app `NAME:PORT` served in the VM (repeatable; recorded, not exposed yet)")
	fl.StringVar(&f.idle, "idle-timeout", "", "suspend tasks idle this long, e.g. 15m (0: the server's default; never: don't)")
	fl.StringVar(&f.fromFile, "from-file", "", "read the whole spec from `FILE` (JSON, as in --json; - for stdin); other flags then change it")
}

// anySet reports whether any spec flag was given.
func (f *profileFlags) anySet(cmd *cobra.Command) bool {
	for _, n := range []string{"image", "harness", "model", "mode", "repo", "repo-credential", "repo-push", "repo-api", "env", "egress", "credential", "skill", "app", "idle-timeout", "from-file"} {
		if cmd.Flags().Changed(n) {
			return true
		}
	}
	return false
}

const profileFlagsHelp = `Lists (--repo, --env, --egress, --credential, --skill, --app) are given by
repeating the flag; on edit, a list flag replaces that whole list (give it
once with an empty value to clear it, e.g. --egress ''), and
--repo-credential PATH=SECRET changes one repo's credential (PATH= drops it).
A repo with a credential on an https URL is brokered: the guest may fetch
it; --repo-push PATH lets it push too, --repo-api PATH call the host's REST
API for it (api.github.com/repos/OWNER/NAME, or /api/v3/repos/OWNER/NAME on
another host; writes such as opening a pull request need --repo-push as
well); PATH=false takes either away.`

// spec builds the spec: base (or --from-file's), then every flag given.
func (f *profileFlags) spec(cmd *cobra.Command, base apiv1.ProfileSpec) (apiv1.ProfileSpec, error) {
	spec := base
	if f.fromFile != "" {
		var err error
		if spec, err = readSpecFile(cmd, f.fromFile); err != nil {
			return spec, err
		}
	}
	set := cmd.Flags().Changed
	for _, s := range []struct {
		flag     string
		dst, src *string
	}{{"image", &spec.Image, &f.image}, {"harness", &spec.Harness, &f.harness}, {"model", &spec.Model, &f.model}, {"mode", &spec.Mode, &f.mode}} {
		if set(s.flag) {
			*s.dst = *s.src
		}
	}
	var err error
	if set("repo") {
		if spec.Repos, err = parseRepos(nonEmpty(f.repos)); err != nil {
			return spec, err
		}
	}
	if err := setRepoCredentials(spec.Repos, nonEmpty(f.repoCreds)); err != nil {
		return spec, err
	}
	if err := setRepoGrants(spec.Repos, "--repo-push", nonEmpty(f.repoPush), func(r *apiv1.ProfileRepo, on bool) { r.Push = on }); err != nil {
		return spec, err
	}
	if err := setRepoGrants(spec.Repos, "--repo-api", nonEmpty(f.repoAPI), func(r *apiv1.ProfileRepo, on bool) { r.API = on }); err != nil {
		return spec, err
	}
	if set("env") {
		if spec.Env, err = parseEnv(nonEmpty(f.env)); err != nil {
			return spec, err
		}
	}
	if set("app") {
		if spec.Apps, err = parseApps(nonEmpty(f.apps)); err != nil {
			return spec, err
		}
	}
	for _, l := range []struct {
		flag     string
		dst, src *[]string
	}{{"egress", &spec.Egress, &f.egress}, {"credential", &spec.Credentials, &f.creds}, {"skill", &spec.Skills, &f.skills}} {
		if set(l.flag) {
			*l.dst = nonEmpty(*l.src)
		}
	}
	if set("idle-timeout") {
		if spec.IdleTimeoutS, err = parseIdleTimeout(f.idle); err != nil {
			return spec, err
		}
	}
	return spec, nil
}

// nonEmpty drops empty values (a list flag given as ” clears the list).
func nonEmpty(vals []string) []string {
	var out []string
	for _, v := range vals {
		if strings.TrimSpace(v) != "" {
			out = append(out, v)
		}
	}
	return out
}

// readSpecFile reads a ProfileSpec from a JSON file (- for stdin),
// refusing unknown fields.
func readSpecFile(cmd *cobra.Command, file string) (apiv1.ProfileSpec, error) {
	var spec apiv1.ProfileSpec
	var data []byte
	var err error
	if file == "-" {
		data, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20))
	} else {
		data, err = os.ReadFile(file)
	}
	if err != nil {
		return spec, usageError{fmt.Errorf("--from-file: %w", err)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, usageError{fmt.Errorf("--from-file %s: not a profile spec: %w", file, err)}
	}
	return spec, nil
}

// parseRepos reads --repo URL[#REF][=PATH] values.
func parseRepos(vals []string) ([]apiv1.ProfileRepo, error) {
	var out []apiv1.ProfileRepo
	for _, v := range vals {
		rest, p := v, ""
		if i := strings.LastIndexByte(v, '='); i >= 0 {
			rest, p = v[:i], v[i+1:]
			if p == "" {
				return nil, usageError{fmt.Errorf("--repo %q: the path after = is empty", v)}
			}
		}
		u, ref, _ := strings.Cut(rest, "#")
		if u == "" {
			return nil, usageError{fmt.Errorf("--repo %q: want URL[#REF][=PATH], e.g. https://github.com/acme/app.git#main=app", v)}
		}
		out = append(out, apiv1.ProfileRepo{URL: u, Ref: ref, Path: p})
	}
	return out, nil
}

// repoPath is where a repo is cloned: its path, else the URL's last
// element without .git (as the server derives it).
func repoPath(r apiv1.ProfileRepo) string {
	if r.Path != "" {
		return r.Path
	}
	p := r.URL
	if u, err := url.Parse(r.URL); err == nil {
		p = u.Path
	}
	return strings.TrimSuffix(path.Base(strings.TrimRight(p, "/")), ".git")
}

// setRepoCredentials applies --repo-credential PATH=SECRET values.
func setRepoCredentials(repos []apiv1.ProfileRepo, vals []string) error {
	for _, v := range vals {
		p, secret, ok := strings.Cut(v, "=")
		if !ok || p == "" {
			return usageError{fmt.Errorf("--repo-credential %q: want PATH=SECRET", v)}
		}
		if err := forRepo(repos, "--repo-credential", v, p, func(r *apiv1.ProfileRepo) { r.Credential = secret }); err != nil {
			return err
		}
	}
	return nil
}

// setRepoGrants applies PATH[=true|false] values of flag with set.
func setRepoGrants(repos []apiv1.ProfileRepo, flag string, vals []string, set func(*apiv1.ProfileRepo, bool)) error {
	for _, v := range vals {
		p, val, hasVal := strings.Cut(v, "=")
		on, err := strconv.ParseBool(val)
		if p == "" || (hasVal && err != nil) {
			return usageError{fmt.Errorf("%s %q: want PATH, or PATH=false to take it away", flag, v)}
		}
		if err := forRepo(repos, flag, v, p, func(r *apiv1.ProfileRepo) { set(r, on || !hasVal) }); err != nil {
			return err
		}
	}
	return nil
}

// forRepo applies change to the repos at path p (flag's value v).
func forRepo(repos []apiv1.ProfileRepo, flag, v, p string, change func(*apiv1.ProfileRepo)) error {
	found := false
	paths := make([]string, 0, len(repos))
	for i := range repos {
		paths = append(paths, repoPath(repos[i]))
		if repoPath(repos[i]) == p {
			change(&repos[i])
			found = true
		}
	}
	if !found {
		return usageError{fmt.Errorf("%s %q: no repo has path %s (repos: %s)", flag, v, p, strings.Join(paths, ", "))}
	}
	return nil
}

// parseApps reads --app NAME:PORT values.
func parseApps(vals []string) ([]apiv1.ProfileApp, error) {
	var out []apiv1.ProfileApp
	for _, v := range vals {
		name, port, ok := strings.Cut(v, ":")
		n, err := strconv.Atoi(port)
		if !ok || name == "" || err != nil {
			return nil, usageError{fmt.Errorf("--app %q: want NAME:PORT, e.g. web:8080", v)}
		}
		out = append(out, apiv1.ProfileApp{Name: name, Port: n})
	}
	return out, nil
}

func (a profileCmds) profileCreateCmd() *cobra.Command {
	var f profileFlags
	var grants []string
	cmd := &cobra.Command{
		Use:   "create NAME --image IMAGE --harness HARNESS [flags]",
		Short: "Create a profile and print what it grants",
		Long: `Create a profile. The server checks everything it names at once: the image
is enabled, the harness is registered and runs on the image, the model and
mode are the harness's, every credential is a secret of a kind the harness
needs (and every kind it needs is given), repo credentials are git_https
or github_app secrets for the repo's host (a GitHub App's repos on one
account), repo paths are unique, env names are valid and not the harness's
credential variables, hosts and apps are well formed. On success it prints
the grant receipt (see ` + "`engrams profile get`" + `). Without --grant only the
organisation's owners and admins may use it. ` + grantsHelp + `

` + profileFlagsHelp,
		Example: `  engrams profile create reviewer --image python --harness claude-code --credential anthropic \
      --repo https://github.com/acme/app.git#main --repo-credential app=gh --env LOG_LEVEL=debug
  engrams profile create coder --image python --harness claude-code --credential anthropic \
      --repo https://github.com/acme/app.git --repo-credential app=gh --repo-push app --repo-api app
  engrams profile create coder --image node --harness codex@0.171.0 --model gpt-5.5 --credential openai
  engrams profile create copy --from-file spec.json --grant everyone`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec, err := f.spec(cmd, apiv1.ProfileSpec{})
			if err != nil {
				return err
			}
			gs, err := parseGrants(grants)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Profiles().Create(cmd.Context(), apiv1.CreateProfileRequest{Name: args[0], Spec: spec, Grants: gs})
			if err != nil {
				return fmt.Errorf("create profile %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created profile %s (version %d)\n\n", r.Profile.Name, r.Profile.Version)
			return a.printReceipt(cmd.OutOrStdout(), r)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringArrayVar(&grants, "grant", nil, "who may use it: everyone, user:USER_ID or group:NAME (repeatable)")
	return cmd
}

func (a profileCmds) profileEditCmd() *cobra.Command {
	var f profileFlags
	cmd := &cobra.Command{
		Use:   "edit NAME [flags]",
		Short: "Change a profile (only what the flags say)",
		Long: `Change a profile: read it, apply the flags given (--from-file replaces the
whole spec, other flags then change it), check it again and save it as the
next version. If someone else saved it in between, nothing is changed and
the command says so: run it again.

` + profileFlagsHelp,
		Example: `  engrams profile edit reviewer --model opus
  engrams profile edit reviewer --egress pypi.org --egress files.pythonhosted.org
  engrams profile edit reviewer --egress ''
  engrams profile edit reviewer --repo-credential app=gh-new
  engrams profile edit reviewer --repo-api app --repo-push app=false`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !f.anySet(cmd) {
				return usageError{errors.New("nothing to change: give the flags to change, or --from-file")}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			cur, err := c.Profiles().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("edit profile %s: %w", args[0], err)
			}
			spec, err := f.spec(cmd, cur.Profile.Spec)
			if err != nil {
				return err
			}
			r, err := c.Profiles().Update(cmd.Context(), cur.Profile.Name, apiv1.UpdateProfileRequest{Spec: spec, Version: cur.Profile.Version})
			if err != nil {
				return fmt.Errorf("edit profile %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "updated profile %s to version %d\n\n", r.Profile.Name, r.Profile.Version)
			return a.printReceipt(cmd.OutOrStdout(), r)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func (a profileCmds) profileListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List profiles",
		Long:    "List profiles by name with their image, harness, model, mode, repos and credentials.",
		Example: `  engrams profile list
  engrams profile list --json | jq -r '.items[].name'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ps, err := c.Profiles().List(cmd.Context())
			if err != nil {
				return fmt.Errorf("list profiles: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), ps, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "NAME", "IMAGE", "HARNESS", "MODEL", "MODE", "REPOS", "CREDENTIALS", "VERSION", "UPDATED")
			for _, p := range ps {
				s := p.Spec
				paths := make([]string, 0, len(s.Repos))
				for _, r := range s.Repos {
					paths = append(paths, repoPath(r))
				}
				row(tw, p.Name, s.Image, s.Harness, s.Model, s.Mode, strings.Join(paths, ","), strings.Join(s.Credentials, ","), p.Version, a.when(p.UpdatedAt))
			}
			return tw.Flush()
		},
	}
}

func (a profileCmds) profileShowCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Aliases: []string{"show"},
		Short:   "Show a profile's grant receipt: what its tasks can do and reach",
		Long: `Show what a task started from the profile gets, resolved now: the image
(and its digest), the harness version it resolves to, the model and mode,
its powers in plain words, every host it names and whether the task can
reach it (and whether that is enforced), each credential and how it is
delivered, its repos, env names, skills and apps. Problems (something it
names was deleted or changed) are listed first: tasks cannot start until
they are fixed. --json prints the profile, receipt and problems.`,
		Example: `  engrams profile get reviewer
  engrams profile get reviewer --json | jq .receipt.hosts`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Profiles().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("show profile %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r)
			}
			return a.printReceipt(cmd.OutOrStdout(), r)
		},
	}
}

func (a profileCmds) profileDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME",
		Short:   "Delete a profile",
		Long:    "Delete a profile: no task starts from it again and its name is free. Tasks started from it keep their record of it.",
		Example: `  engrams profile delete reviewer`,
		Args:    usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			p, err := c.Profiles().Delete(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("delete profile %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), p)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "deleted profile %s (%s)\n", p.Name, p.ID)
			return err
		},
	}
}

// printReceipt prints a profile's grant receipt in plain sections.
func (a profileCmds) printReceipt(w io.Writer, r apiv1.ProfileResponse) error {
	p, rc := r.Profile, r.Receipt
	fmt.Fprintf(w, "Profile %s (version %d, id %s, updated %s)\n", p.Name, p.Version, p.ID, a.when(p.UpdatedAt))
	if !p.DeletedAt.IsZero() {
		fmt.Fprintf(w, "DELETED %s: no task starts from it\n", a.when(p.DeletedAt))
	}
	if len(r.Problems) > 0 {
		fmt.Fprintln(w, "\nProblems (tasks cannot start until they are fixed):")
		for _, pr := range r.Problems {
			fmt.Fprintln(w, "  - "+strings.ReplaceAll(pr, "\n", "\n    "))
		}
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	row(tw, "Image:", imageLine(rc.Image))
	row(tw, "Harness:", harnessLine(rc.Harness))
	row(tw, "Model:", withDefault(rc.Model, p.Spec.Model))
	row(tw, "Mode:", withDefault(rc.Mode, p.Spec.Mode))
	row(tw, "Idle timeout:", idleTimeout(rc.IdleTimeoutS))
	row(tw, "Used by:", grantsLine(p.Grants))
	if err := tw.Flush(); err != nil {
		return err
	}
	section(w, "What a task can do", rc.Powers, func(s string) string { return s })
	printHosts(w, rc.Hosts)
	section(w, "Enforcement", rc.Enforcement, func(e apiv1.ReceiptEnforcement) string {
		state := "NOT enforced"
		if e.Enforced {
			state = "enforced"
		}
		return fmt.Sprintf("%s: %s: %s", e.Backend, state, e.How)
	})
	section(w, "Credentials", rc.Credentials, func(c apiv1.ReceiptCredential) string {
		if len(c.EnforcedOn) > 0 {
			return fmt.Sprintf("%s (%s, never in the guest on %s): %s", c.Name, c.Kind, strings.Join(c.EnforcedOn, ", "), c.Detail)
		}
		return fmt.Sprintf("%s (%s): %s", c.Name, c.Kind, c.Detail)
	})
	section(w, "Repos", rc.Repos, func(r apiv1.ProfileRepo) string {
		s := repoPath(r) + ": " + r.URL + " at " + firstNonEmpty(r.Ref, "the default branch")
		if r.Credential != "" {
			s += ", cloned with " + r.Credential
		}
		if r.Push {
			s += "; the guest may push"
		}
		if r.API {
			s += "; the guest may call its REST API"
		}
		return s
	})
	section(w, "Env (names; values in --json)", rc.Env, func(s string) string { return s })
	section(w, "Skills", rc.Skills, func(s apiv1.ReceiptSkill) string { return s.Name + mountedNote(s.Mounted, "mounted") })
	section(w, "Apps", rc.Apps, func(ap apiv1.ReceiptApp) string {
		return fmt.Sprintf("%s on port %d%s", ap.Name, ap.Port, mountedNote(ap.Exposed, "exposed"))
	})
	return nil
}

func mountedNote(ok bool, what string) string {
	if ok {
		return ""
	}
	return " (not " + what + " yet)"
}

// section prints a titled list, "none" when empty.
func section[T any](w io.Writer, title string, items []T, line func(T) string) {
	if len(items) == 0 {
		fmt.Fprintf(w, "\n%s: none\n", title)
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, it := range items {
		fmt.Fprintln(w, "  - "+line(it))
	}
}

// printHosts lists the receipt's hosts, those with the same terms on one
// line, each term said once (the reason says how a host is reached).
func printHosts(w io.Writer, hosts []apiv1.ReceiptHost) {
	type line struct{ names, terms string }
	var lines []line
	seen := map[string]int{}
	for _, h := range hosts {
		terms := hostTerms(h)
		if i, ok := seen[terms]; ok {
			lines[i].names += ", " + h.Host
			continue
		}
		seen[terms] = len(lines)
		lines = append(lines, line{h.Host, terms})
	}
	section(w, "Hosts", lines, func(l line) string { return l.names + ": " + l.terms })
}

// hostTerms is what a receipt says of one host after its name.
func hostTerms(h apiv1.ReceiptHost) string {
	state := "NOT reachable"
	if h.Reachable {
		state = "reachable"
	}
	switch {
	case len(h.EnforcedOn) > 0:
		state += ", enforced on " + strings.Join(h.EnforcedOn, ", ")
	case h.Enforced:
		state += ", enforced"
	default:
		state += ", not enforced"
	}
	return fmt.Sprintf("%s (%s): %s", state, h.Why, h.Reason)
}

// printGrants is the short form of a receipt's network terms that `task
// start` prints: which backends enforce them, and the hosts with how each
// is reached.
func printGrants(w io.Writer, rc apiv1.Receipt, profile string) {
	var on, off []string
	for _, e := range rc.Enforcement {
		if e.Enforced {
			on = append(on, e.Backend)
		} else {
			off = append(off, e.Backend)
		}
	}
	var terms []string
	if len(on) > 0 {
		terms = append(terms, "enforced on "+strings.Join(on, ", "))
	}
	if len(off) > 0 {
		terms = append(terms, "NOT enforced on "+strings.Join(off, ", "))
	}
	if len(terms) > 0 {
		fmt.Fprintf(w, "egress: %s (see `engrams profile get %s`)\n", strings.Join(terms, "; "), profile)
	}
	hosts := make([]string, 0, len(rc.Hosts))
	for _, h := range rc.Hosts {
		if h.Reachable {
			hosts = append(hosts, h.Host+" ("+firstNonEmpty(h.Via, "reachable")+")")
		}
	}
	if len(hosts) == 0 {
		hosts = append(hosts, "no host")
	}
	fmt.Fprintf(w, "reaches: %s\n", strings.Join(hosts, ", "))
}

func imageLine(im apiv1.ReceiptImage) string {
	parts := []string{im.Name}
	if im.Ref != "" {
		parts = append(parts, im.Ref)
	}
	if im.Digest != "" {
		parts = append(parts, shortDigest(im.Digest))
	} else if im.ID != "" {
		parts = append(parts, "(being enabled: no digest yet)")
	}
	return strings.Join(parts, "  ")
}

func harnessLine(h apiv1.ReceiptHarness) string {
	s := h.Name
	if h.Version != "" {
		s += "@" + h.Version
	}
	if h.Protocol != "" {
		s += "  (" + h.Protocol + ", " + shortDigest(h.Digest) + ")"
	}
	return s
}

// withDefault shows the effective model or mode, saying when it is the
// harness's default.
func withDefault(effective, asked string) string {
	switch {
	case effective == "":
		return ""
	case asked == "":
		return effective + " (the harness's default)"
	}
	return effective
}

// grantsHelp says how grants are written on the command line.
const grantsHelp = `A grant is "everyone" (every member of the organisation), "user:USER_ID"
(one member; see ` + "`engrams member list`" + `) or "group:NAME" (the members in
a group: see ` + "`engrams member set-groups`" + `; groups may also come from the
identity provider). Owners and admins may use every profile.`

// parseGrant reads one grant as written on the command line.
func parseGrant(s string) (apiv1.Grant, error) {
	if s == apiv1.GrantEveryone {
		return apiv1.Grant{Kind: apiv1.GrantEveryone}, nil
	}
	kind, subject, ok := strings.Cut(s, ":")
	if !ok || subject == "" || (kind != apiv1.GrantUser && kind != apiv1.GrantGroup) {
		return apiv1.Grant{}, usageError{fmt.Errorf("grant %q: want everyone, user:USER_ID or group:NAME", s)}
	}
	return apiv1.Grant{Kind: kind, Subject: subject}, nil
}

func parseGrants(in []string) ([]apiv1.Grant, error) {
	out := make([]apiv1.Grant, 0, len(in))
	for _, s := range in {
		g, err := parseGrant(s)
		if err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// grantString writes g as the command line reads it.
func grantString(g apiv1.Grant) string {
	if g.Kind == apiv1.GrantEveryone {
		return g.Kind
	}
	return g.Kind + ":" + g.Subject
}

// grantsLine is a profile's grants in one line.
func grantsLine(gs []apiv1.Grant) string {
	if len(gs) == 0 {
		return "owners and admins only"
	}
	out := make([]string, 0, len(gs))
	for _, g := range gs {
		out = append(out, grantString(g))
	}
	return strings.Join(out, ", ")
}

// profileGrantCmd adds (or, with revoke, removes) grants of a profile.
func (a profileCmds) profileGrantCmd(revoke bool) *cobra.Command {
	use, short, example := "grant NAME GRANT...", "Let members use a profile", `  engrams profile grant reviewer everyone
  engrams profile grant reviewer group:backend user:0193a2…`
	if revoke {
		use, short, example = "revoke NAME GRANT...", "Take back grants of a profile", `  engrams profile revoke reviewer everyone
  engrams profile revoke reviewer group:backend`
	}
	return &cobra.Command{
		Use: use, Short: short, Example: example,
		Long: short + `. The profile's grants are read, changed and saved as its next
version; if someone else saved it in between, nothing is changed and the
command says so: run it again.

` + grantsHelp,
		Args: usageArgs(cobra.MinimumNArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			given, err := parseGrants(args[1:])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			cur, err := c.Profiles().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%s %s: %w", cmd.Name(), args[0], err)
			}
			grants := slices.Clone(cur.Profile.Grants)
			for _, g := range given {
				has := slices.Contains(grants, g)
				switch {
				case revoke && !has:
					return usageError{fmt.Errorf("profile %s does not grant %s (it grants: %s)", args[0], grantString(g), grantsLine(grants))}
				case revoke:
					grants = slices.DeleteFunc(grants, func(h apiv1.Grant) bool { return h == g })
				case !has:
					grants = append(grants, g)
				}
			}
			r, err := c.Profiles().Update(cmd.Context(), cur.Profile.Name,
				apiv1.UpdateProfileRequest{Spec: cur.Profile.Spec, Grants: &grants, Version: cur.Profile.Version})
			if err != nil {
				return fmt.Errorf("%s %s: %w", cmd.Name(), args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), r.Profile)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "profile %s (version %d) may be used by: %s\n", r.Profile.Name, r.Profile.Version, grantsLine(r.Profile.Grants))
			return nil
		},
	}
}
