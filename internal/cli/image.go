package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/engrams/engrams/api/apiv1"
)

func (a imageCmds) imageCmd() *cobra.Command {
	cmd := group("image", "Enable OCI images that sessions start from, warm",
		`An image is an OCI image enabled once: the coordinator pulls its linux/amd64
entry, builds a root filesystem, boots it on a host, runs its warm-up
command and keeps the VM's memory and disk as the image's base snapshot.
Sessions created with `+"`engrams session create --image NAME`"+` start from that
snapshot, already warm.

Enabling or refreshing is a job: pending, then materializing (stages
resolve, pull, rootfs, chunks), then capturing (boot, warmup, snapshot),
then ready or failed.`)
	cmd.Aliases = []string{"images", "img"}
	cmd.Annotations = map[string]string{
		annNotFound: "list images with `engrams image list` (--all shows disabled ones)",
		annConflict: "the image is not in a state that allows this; check it with `engrams image get NAME`",
	}
	cmd.AddCommand(a.imageEnableCmd(), a.imageListCmd(), a.imageGetCmd(), a.imageJobsCmd(),
		a.imageDisableCmd(), a.imageRefreshCmd())
	return cmd
}

// enableFlags are the flags of `image enable`.
type enableFlags struct {
	req                       apiv1.EnableImageRequest
	env                       []string
	warmupTimeout, stall      string
	user                      string
	passwordStdin, tokenStdin bool
	noWait                    bool
}

func (a imageCmds) imageEnableCmd() *cobra.Command {
	var f enableFlags
	cmd := &cobra.Command{
		Use:   "enable REF",
		Short: "Enable an OCI image: pull, build, boot, warm up, snapshot",
		Long: `Enable an OCI image for sessions. The coordinator pulls the image's
linux/amd64 entry, builds a root filesystem from it (--disk GiB), boots it
on a host with --memory and --vcpus, runs --warmup once (install
dependencies, fill caches, start daemons) and keeps the VM's memory and
disk as the image's base snapshot. Sessions created with
` + "`engrams session create --image NAME`" + ` start from that snapshot, already warm,
with the image's memory, vCPUs and environment.

By default the command shows the job's progress and ends when the image is
ready, printing its digest, base snapshot and how long each stage took. If
the job fails it prints the error and the end of the warm-up's output and
exits non-zero. With --no-wait it returns once the job is queued; follow it
with ` + "`engrams image jobs NAME`" + `.

Enabling the same REF under the same name again is harmless: a ready image
answers at once and a failed one is tried again. A digest already enabled
with the same settings reuses its base snapshot.

Private registries: give --registry-user with --registry-password-stdin, or
--registry-token-stdin, and pipe the secret in (typed at a terminal, it is
not echoed). The coordinator stores it encrypted and never shows it again.`,
		Example: `  engrams image enable python:3.12-slim
  engrams image enable ghcr.io/acme/agent-env:2025.1 --name agent --memory 2048 --vcpus 2 \
      --env PIP_INDEX_URL=https://pypi.internal/simple --warmup 'pip install -r /app/requirements.txt'
  printf %s "$REGISTRY_PASSWORD" | engrams image enable registry.example.com/team/web:1.4 \
      --registry-user ci --registry-password-stdin
  job=$(engrams image enable --no-wait --json node:22 | jq -r .job.id)`,
		Args: usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{annConflict: "another image has that name: choose another --name, " +
			"or `engrams image disable NAME` first"},
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := a.enableRequest(cmd, args[0], &f)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Images().Enable(cmd.Context(), req)
			if err != nil {
				return fmt.Errorf("enable image %s: %w", args[0], err)
			}
			return a.followJob(cmd, c, r, f.noWait)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.req.Name, "name", "", "the `NAME` sessions use (default: the repository's last path element, e.g. web for registry.example.com/team/web:1.4)")
	fl.StringArrayVar(&f.env, "env", nil, "environment variable `KEY=VALUE` for the warm-up and every session (repeatable)")
	fl.IntVar(&f.req.MemoryMiB, "memory", 0, "guest memory in `MiB` for the warm-up VM and every session (default 512)")
	fl.IntVar(&f.req.VCPUs, "vcpus", 0, "`N` virtual CPUs for the warm-up VM and every session (default 1)")
	fl.IntVar(&f.req.DiskGiB, "disk", 0, "root disk size in `GiB` (default 4)")
	fl.StringVar(&f.req.Workdir, "workdir", "", "working directory `DIR` (default: the image's WORKDIR, else /)")
	fl.StringVar(&f.req.Warmup, "warmup", "", "shell command `CMD` run once before the base snapshot, e.g. 'npm ci'")
	fl.StringVar(&f.warmupTimeout, "warmup-timeout", "", "fail the warm-up after this `DURATION`, e.g. 20m (default 10m)")
	fl.StringVar(&f.stall, "warmup-stall", "", "fail the warm-up after this `DURATION` without output (default 2m)")
	fl.StringVar(&f.user, "registry-user", "", "log in to the registry as `USER`; give the password with --registry-password-stdin")
	fl.BoolVar(&f.passwordStdin, "registry-password-stdin", false, "read the registry password from stdin (not echoed)")
	fl.BoolVar(&f.tokenStdin, "registry-token-stdin", false, "read a registry bearer token from stdin (not echoed)")
	fl.BoolVar(&f.noWait, "no-wait", false, "return once the job is queued instead of showing its progress")
	return cmd
}

// enableRequest checks the flags of `image enable` and reads the registry
// secret, if any, from stdin.
func (a imageCmds) enableRequest(cmd *cobra.Command, ref string, f *enableFlags) (apiv1.EnableImageRequest, error) {
	req := f.req
	req.Ref = ref
	var err error
	if req.Env, err = parseEnv(f.env); err != nil {
		return req, err
	}
	if req.MemoryMiB < 0 || req.VCPUs < 0 || req.DiskGiB < 0 {
		return req, usageError{errors.New("--memory, --vcpus and --disk must not be negative")}
	}
	if req.WarmupTimeoutS, err = parseLimit("--warmup-timeout", f.warmupTimeout); err != nil {
		return req, err
	}
	if req.WarmupStallS, err = parseLimit("--warmup-stall", f.stall); err != nil {
		return req, err
	}
	switch {
	case f.passwordStdin && f.tokenStdin:
		return req, usageError{errors.New("use one of --registry-password-stdin and --registry-token-stdin")}
	case f.passwordStdin && f.user == "":
		return req, usageError{errors.New("--registry-password-stdin needs --registry-user")}
	case f.user != "" && !f.passwordStdin && !f.tokenStdin:
		return req, usageError{errors.New("--registry-user needs --registry-password-stdin (the password is never taken as a flag)")}
	case f.passwordStdin:
		pw, err := a.readSecret(cmd, "registry password")
		req.Credentials = &apiv1.RegistryAuth{Username: f.user, Password: pw}
		return req, err
	case f.tokenStdin:
		tok, err := a.readSecret(cmd, "registry token")
		req.Credentials = &apiv1.RegistryAuth{Username: f.user, Token: tok}
		return req, err
	}
	return req, nil
}

// parseLimit reads a duration flag in whole seconds (rounded up, at least
// 1s), 0 or "" for the server's default.
func parseLimit(flag, s string) (int, error) {
	if s = strings.TrimSpace(s); s == "" || s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Second {
		return 0, usageError{fmt.Errorf("%s %q: want a duration of at least 1s, e.g. 10m (0: the server's default)", flag, s)}
	}
	return int((d + time.Second - 1) / time.Second), nil
}

// maxSecretBytes bounds a password or token read from stdin.
const maxSecretBytes = 16 << 10

// readSecret reads a password or token from stdin without showing it: at a
// terminal with echo off, else all of stdin without its trailing newline.
// The secret never appears in an error.
func (a imageCmds) readSecret(cmd *cobra.Command, what string) (string, error) {
	in := cmd.InOrStdin()
	var b []byte
	var err error
	if fd, ok := a.terminalFD(in); ok {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s: ", what)
		b, err = term.ReadPassword(fd)
		fmt.Fprintln(cmd.ErrOrStderr())
	} else {
		b, err = io.ReadAll(io.LimitReader(in, maxSecretBytes+1))
	}
	if err != nil {
		return "", fmt.Errorf("read the %s from stdin: %w", what, err)
	}
	if len(b) > maxSecretBytes {
		return "", usageError{fmt.Errorf("the %s on stdin is over %d bytes", what, maxSecretBytes)}
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", usageError{fmt.Errorf("no %s on stdin: pipe it in, e.g. printf %%s \"$SECRET\" | engrams image enable ...", what)}
	}
	return s, nil
}

func (a imageCmds) imageRefreshCmd() *cobra.Command {
	var noWait bool
	cmd := &cobra.Command{
		Use:   "refresh NAME",
		Short: "Re-pull an image's tag and make a new base snapshot",
		Long: `Refresh an image: resolve its reference again and, if the tag now names
another digest, pull it, build it, warm it up and snapshot it like enable
does, with the same settings. Until the new base snapshot is ready the image
keeps serving its current one; sessions already running keep theirs. If the
refresh fails, the image stays as it was.

By default the command shows the job's progress and waits, as enable does;
with --no-wait it returns once the job is queued.`,
		Example: `  engrams image refresh web
  engrams image refresh --no-wait web`,
		Args:        usageArgs(cobra.ExactArgs(1)),
		Annotations: map[string]string{annConflict: "a disabled image cannot be refreshed: enable it again with `engrams image enable`"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r, err := c.Images().Refresh(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("refresh image %s: %w", args[0], err)
			}
			return a.followJob(cmd, c, r, noWait)
		},
	}
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the job is queued instead of showing its progress")
	return cmd
}

func (a imageCmds) imageDisableCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "disable NAME",
		Short: "Stop starting sessions from an image",
		Long: `Disable an image: no new session starts from it and its name is free for
another enable. Sessions already running from it, and their snapshots, keep
what they use. A disabled image stays listed with ` + "`engrams image list --all`" + `.`,
		Example: `  engrams image disable web
  engrams image disable --json web | jq .state`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			img, err := c.Images().Disable(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("disable image %s: %w", args[0], err)
			}
			if a.jsonOut {
				return printJSON(cmd.OutOrStdout(), img)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "disabled image %s (%s); sessions already running from it keep running\n", img.Name, img.ID)
			return nil
		},
	}
}

func (a imageCmds) imageListCmd() *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List enabled images",
		Long: `List images by name with their state (pending, ready, failed; disabled
with --all), reference, digest, session size and last job.`,
		Example: `  engrams image list
  engrams image list --all
  engrams image list --json | jq -r '.items[] | select(.state == "ready") | .name'`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			imgs, err := c.Images().List(cmd.Context(), all)
			if err != nil {
				return fmt.Errorf("list images: %w", err)
			}
			if a.jsonOut {
				return printList(cmd.OutOrStdout(), imgs, "")
			}
			tw := newTable(cmd.OutOrStdout())
			row(tw, "NAME", "STATE", "REF", "DIGEST", "MEMORY", "VCPUS", "DISK", "LAST JOB", "UPDATED")
			for _, img := range imgs {
				row(tw, img.Name, img.State, img.Ref, shortDigest(img.Digest), memory(img.Config.MemoryMiB), img.Config.VCPUs,
					disk(img.Config.DiskGiB), jobSummary(img.LastJob), a.when(img.UpdatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "include disabled images")
	return cmd
}

// shortDigest keeps the algorithm and 12 hex digits.
func shortDigest(d string) string {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok || len(hex) <= 12 {
		return d
	}
	return algo + ":" + hex[:12]
}

func disk(gib int) string {
	if gib == 0 {
		return ""
	}
	return fmt.Sprintf("%d GiB", gib)
}

// jobSummary is "kind state[ stage][ pct%]" of j ("" for none).
func jobSummary(j *apiv1.ImageJob) string {
	if j == nil {
		return ""
	}
	s := j.Kind + " " + stageLabel(*j)
	if !jobEnded(*j) && j.BytesTotal > 0 {
		s += fmt.Sprintf(" %d%%", percent(j.BytesDone, j.BytesTotal))
	}
	return s
}

func (a imageCmds) imageGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get NAME",
		Aliases: []string{"show"},
		Short:   "Show an image, its settings and its last job",
		Long: `Show an image: its state, reference and digest, who it pulls as (never
the secret), its base snapshot and the host facts sessions must match, the
hosts that cache it, the settings its sessions run with, and its last job
with the warm-up's output if that failed. NAME may also be the image's id.`,
		Example: `  engrams image get web
  engrams image get --json web | jq -r .base_snapshot_id`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			img, err := c.Images().Get(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("get image %s: %w", args[0], err)
			}
			out := a.termOut(cmd.OutOrStdout()) // the image's config and warm-up output are its own
			if a.jsonOut {
				return printJSON(out, img)
			}
			return a.printImage(out, img)
		},
	}
}

func (a imageCmds) printImage(w io.Writer, img apiv1.Image) error {
	cfg := img.Config
	env := make([]string, 0, len(cfg.Env))
	for _, k := range slices.Sorted(maps.Keys(cfg.Env)) {
		env = append(env, k+"="+cfg.Env[k])
	}
	tw := newTable(w)
	for _, kv := range [][2]any{
		{"Name", img.Name},
		{"ID", img.ID},
		{"State", img.State},
		{"Ref", img.Ref},
		{"Digest", img.Digest},
		{"Credentials", img.Credentials},
		{"Base snapshot", img.BaseSnapshotID},
		{"Snapshot host", factsSummary(img.Facts)},
		{"Cached on", strings.Join(img.ReadyHosts, ", ")},
		{"Memory", memory(cfg.MemoryMiB)},
		{"vCPUs", cfg.VCPUs},
		{"Disk", disk(cfg.DiskGiB)},
		{"Workdir", cfg.Workdir},
		{"User", cfg.User},
		{"Libc", cfg.Libc},
		{"Entrypoint", strings.Join(cfg.Entrypoint, " ")},
		{"Env", strings.Join(env, " ")},
		{"Warm-up", cfg.Warmup},
		{"Warm-up limits", warmupLimits(cfg)},
		{"Created", a.when(img.CreatedAt)},
		{"Updated", a.when(img.UpdatedAt)},
	} {
		row(tw, fmt.Sprint(kv[0])+":", kv[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if img.LastJob == nil {
		return nil
	}
	fmt.Fprintln(w, "\nLast job:")
	if err := a.jobTable(w, []apiv1.ImageJob{*img.LastJob}); err != nil {
		return err
	}
	if img.LastJob.State == apiv1.ImageJobFailed {
		printTail(w, img.LastJob.OutputTail)
	}
	return nil
}

// factsSummary says what a host needs to restore the base snapshot.
func factsSummary(f *apiv1.HostFacts) string {
	if f == nil {
		return ""
	}
	s := f.Backend.Name
	if f.Backend.Acceleration != "" {
		s += "/" + f.Backend.Acceleration
	}
	s += " " + f.Arch
	if f.CPUModel != "" {
		s += " (" + f.CPUModel + ")"
	}
	return strings.TrimSpace(s)
}

func warmupLimits(cfg apiv1.ImageConfig) string {
	if cfg.WarmupTimeoutS == 0 && cfg.WarmupStallS == 0 {
		return ""
	}
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	return fmt.Sprintf("%s overall, %s without output", sec(cfg.WarmupTimeoutS), sec(cfg.WarmupStallS))
}

func (a imageCmds) imageJobsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "jobs NAME",
		Short: "List an image's enable and refresh jobs",
		Long: `List an image's jobs, oldest first: kind (enable, refresh), state
(pending, materializing, capturing, ready, failed), stage and bytes of a
running job, attempts, the time its stages took, and why it failed, then
each job's warnings (what the image lost on the way: device nodes and FIFOs,
which are never created from an image). The warm-up output of a failed job is
in ` + "`engrams image get NAME`" + ` (last job) and in --json.`,
		Example: `  engrams image jobs web
  engrams image jobs --json web | jq -r '.items[-1].output_tail'`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			jobs, err := c.Images().Jobs(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("list jobs of image %s: %w", args[0], err)
			}
			out := a.termOut(cmd.OutOrStdout())
			if a.jsonOut {
				return printList(out, jobs, "")
			}
			return a.jobTable(out, jobs)
		},
	}
}

func (a imageCmds) jobTable(w io.Writer, jobs []apiv1.ImageJob) error {
	tw := newTable(w)
	row(tw, "ID", "KIND", "STATE", "STAGE", "PROGRESS", "ATTEMPTS", "CREATED", "TOOK", "ERROR")
	for _, j := range jobs {
		prog := ""
		if !jobEnded(j) && j.BytesTotal > 0 {
			prog = byteProgress(j.BytesDone, j.BytesTotal)
		}
		row(tw, j.ID, j.Kind, j.State, j.Stage, prog, j.Attempts, a.when(j.CreatedAt), totalTime(j.StagesMS), j.Error)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, j := range jobs {
		for _, warning := range j.Warnings {
			if _, err := fmt.Fprintf(w, "warning (job %s): %s\n", j.ID, warning); err != nil {
				return err
			}
		}
	}
	return nil
}
