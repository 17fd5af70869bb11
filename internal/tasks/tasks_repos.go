package tasks

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/ghapp"
	"github.com/engrams/engrams/internal/guestapi"
)

// cloneTimeout bounds one repository clone on the coordinator.
const cloneTimeout = 10 * time.Minute

// repoPath is where a repository lands under WorkRoot: its path, or
// the URL's last element without ".git".
func repoPath(r apiv1.ProfileRepo) string {
	if r.Path != "" {
		return r.Path
	}
	return strings.TrimSuffix(path.Base(strings.TrimRight(r.URL, "/")), ".git")
}

// cloneRepo clones r on the coordinator (its git credential, if any, stays
// here: it is given to git as an HTTP header through the environment,
// never written to the clone) and copies the clone into the session under
// WorkRoot. The base commit is recorded in a repo_cloned event, which
// task diff compares against. A repository already cloned (the event
// exists) is skipped, so setup may run again. all are the task's repos (a
// GitHub App token is scoped to those sharing r's credential).
func (c *Tasks) cloneRepo(ctx context.Context, org domain.OrgID, taskID domain.TaskID, sessionID domain.SessionID, r apiv1.ProfileRepo, all []apiv1.ProfileRepo) error {
	dir := repoPath(r)
	if done, err := c.repoCloned(ctx, taskID, dir); err != nil || done {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "engrams-clone-")
	if err != nil {
		return fmt.Errorf("clone %s: %w", r.URL, err)
	}
	defer os.RemoveAll(tmp)
	env, err := c.gitEnv(ctx, org, r, all, tmp)
	if err != nil {
		return err
	}
	args := []string{"clone", "--quiet", "--no-hardlinks"}
	if r.Ref != "" {
		args = append(args, "--branch", r.Ref)
	}
	work := filepath.Join(tmp, "repo")
	if out, err := git(ctx, tmp, env, append(args, "--", r.URL, work)...); err != nil {
		return fmt.Errorf("clone %s: %w: %s", r.URL, err, out)
	}
	base, err := git(ctx, work, env, "rev-parse", "HEAD")
	if err != nil {
		return fmt.Errorf("clone %s: read HEAD: %w: %s", r.URL, err, base)
	}
	archive := fmt.Sprintf("/tmp/engrams-clone-%s.tar", c.newID()) // one per clone: two setups never share it
	if err := c.copyTree(ctx, sessionID, work, dir, archive); err != nil {
		return fmt.Errorf("copy the clone of %s into the session: %w", r.URL, err)
	}
	script := `set -e; mkdir -p "$1"; rm -rf "$1/$3"; tar -xf "$2" -C "$1"; rm -f "$2"; git config --global --add safe.directory "$1/$3" 2>/dev/null || true`
	res, err := c.guestRun(ctx, sessionID, guestapi.ExecRequest{Argv: []string{"/bin/sh", "-c", script, "sh", WorkRoot, archive, dir},
		TimeoutMS: int64(cloneTimeout / time.Millisecond)}, 64<<10)
	if err != nil {
		return fmt.Errorf("unpack the clone of %s in the session: %w", r.URL, err)
	}
	if res.ExitCode != 0 || res.Error != "" {
		return fmt.Errorf("unpack the clone of %s in the session: exit %d %s: %s", r.URL, res.ExitCode, res.Error, bytes.TrimSpace(res.Stderr))
	}
	_, err = c.appendTaskEvents(ctx, taskID, taskEvent(TaskEventRepoCloned, map[string]any{
		"path": dir, "url": r.URL, "ref": r.Ref, "base": strings.TrimSpace(base)}))
	return err
}

// repoCloned reports whether the task has a repo_cloned event for dir.
func (c *Tasks) repoCloned(ctx context.Context, taskID domain.TaskID, dir string) (bool, error) {
	repos, err := c.taskRepos(ctx, taskID)
	if err != nil {
		return false, err
	}
	for _, r := range repos {
		if r.Path == dir {
			return true, nil
		}
	}
	return false, nil
}

// gitEnv is the whole environment git runs with on the coordinator: no
// inherited GIT_* variables, no system or global config (HOME is the
// clone's own temp dir), no prompts, no redirects (a token must not follow
// one to another host) and, when the repository has a credential, its
// HTTP Authorization header as a GIT_CONFIG_* entry (not argv, which other
// users of the machine could read). The credential must be a git_https
// or github_app secret for the repository's host.
func (c *Tasks) gitEnv(ctx context.Context, org domain.OrgID, r apiv1.ProfileRepo, all []apiv1.ProfileRepo, home string) ([]string, error) {
	cfg := [][2]string{{"http.followRedirects", "false"}, {"protocol.allow", "user"}, {"protocol.http.allow", "always"},
		{"protocol.https.allow", "always"}}
	cfg = append(cfg, c.cfg.GitConfig...)
	if r.Credential != "" {
		auth, err := c.gitAuth(ctx, org, r, all)
		if err != nil {
			return nil, err
		}
		cfg = append(cfg, [2]string{"http.extraHeader", "Authorization: Basic " + auth})
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "XDG_CONFIG_HOME=" + home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "LANG=C",
		fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(cfg))}
	for i, kv := range cfg {
		env = append(env, fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i, kv[0]), fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i, kv[1]))
	}
	return env, nil
}

// gitMeta is what gitAuth reads of a git credential's meta.
type gitMeta struct {
	Username       string `json:"username"`
	Host           string `json:"host"`
	BaseURL        string `json:"base_url"`
	AppID          string `json:"app_id"`
	InstallationID int64  `json:"installation_id"`
}

// gitAuth is the basic-auth token of a repository's credential, checked
// to be a git_https or github_app secret whose host (when it names one) is
// the URL's. For a GitHub App it is an installation token minted now (or
// cached while it has long to live) scoped to the repos of all that share
// the credential.
func (c *Tasks) gitAuth(ctx context.Context, org domain.OrgID, r apiv1.ProfileRepo, all []apiv1.ProfileRepo) (string, error) {
	sec, err := c.st.GetSecretByName(ctx, org, r.Credential)
	if err != nil {
		return "", fmt.Errorf("git credential %s: %w", r.Credential, err)
	}
	var meta gitMeta
	_ = json.Unmarshal(sec.Meta, &meta)
	u, err := url.Parse(r.URL)
	switch {
	case sec.Kind != apiv1.SecretGitHTTPS && sec.Kind != apiv1.SecretGitHubApp:
		return "", fmt.Errorf("%w: credential %s of %s is a %s secret, not git_https or github_app", domain.ErrInvalid, r.Credential, r.URL, sec.Kind)
	case err != nil:
		return "", fmt.Errorf("%w: repository URL %q: %v", domain.ErrInvalid, r.URL, err)
	case meta.Host != "" && !strings.EqualFold(meta.Host, u.Host) && !strings.EqualFold(meta.Host, u.Hostname()):
		return "", fmt.Errorf("%w: credential %s is for %s, not %s", domain.ErrInvalid, r.Credential, meta.Host, u.Host)
	}
	_, value, err := c.secrets.Open(ctx, sec.ID)
	if err != nil {
		return "", fmt.Errorf("git credential %s: %w", r.Credential, err)
	}
	user := meta.Username
	if sec.Kind == apiv1.SecretGitHubApp {
		token, err := c.appToken(ctx, r, all, meta, value)
		clear(value)
		if err != nil {
			return "", err
		}
		user, value = "x-access-token", []byte(token)
	}
	if user == "" {
		user = "x-access-token"
	}
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + string(value))), nil
}

// appToken mints the installation token a repository is cloned with: the
// app of r's credential, scoped to the names of the repos in all that
// share that credential.
func (c *Tasks) appToken(ctx context.Context, r apiv1.ProfileRepo, all []apiv1.ProfileRepo, meta gitMeta, key []byte) (string, error) {
	if c.appTokens == nil {
		return "", fmt.Errorf("%w: credential %s is a GitHub App, and this server mints no GitHub App tokens", domain.ErrInvalid, r.Credential)
	}
	app, err := ghapp.NewApp(meta.AppID, meta.InstallationID, meta.BaseURL, key)
	if err != nil {
		return "", fmt.Errorf("%w: GitHub App credential %s: %v", domain.ErrInvalid, r.Credential, err)
	}
	var names []string
	for _, o := range append([]apiv1.ProfileRepo{r}, all...) {
		if o.Credential != r.Credential {
			continue
		}
		_, name, err := ghapp.RepoOf(o.URL)
		if err != nil {
			return "", fmt.Errorf("%w: %v", domain.ErrInvalid, err)
		}
		names = append(names, name)
	}
	slices.Sort(names)
	// The coordinator only fetches with it.
	t, err := c.appTokens.Token(ctx, app, slices.Compact(names), map[string]string{"contents": "read", "metadata": "read"})
	if err != nil {
		return "", fmt.Errorf("git credential %s: %w", r.Credential, err)
	}
	return t.Token, nil
}

// git runs git in dir with exactly env and returns its combined output.
func git(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// copyTree streams the tree at root, as a tar with its entries under
// prefix, into the session's file archive (never whole in memory).
func (c *Tasks) copyTree(ctx context.Context, sessionID domain.SessionID, root, prefix, archive string) error {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := tarTree(pw, root, prefix)
		_ = pw.CloseWithError(err)
		done <- err
	}()
	err := c.guestUpload(ctx, sessionID, archive, 0o600, pr)
	_ = pr.CloseWithError(errors.New("upload ended")) // unblocks the writer if the upload stopped early
	if terr := <-done; terr != nil && err == nil {
		err = fmt.Errorf("pack: %w", terr)
	}
	return err
}

// tarTree writes the tree at root into w under prefix: regular files,
// directories and symlinks, with their modes.
func tarTree(w io.Writer, root, prefix string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		} else if !info.Mode().IsRegular() && !info.IsDir() {
			return nil // sockets, devices: not part of a clone
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = path.Join(prefix, filepath.ToSlash(rel))
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("pack %s: %w", root, err)
	}
	return tw.Close()
}

// clonedRepo is a repository a task cloned.
type clonedRepo struct {
	Path string `json:"path"`
	URL  string `json:"url"`
	Ref  string `json:"ref"`
	Base string `json:"base"`
}

// RepoDiff is one cloned repository's changes against its base commit.
type RepoDiff struct {
	Path string
	URL  string
	Base string
	Diff string // unified diff; "" when nothing changed
}

// maxDiffBytes bounds one repository's diff.
const maxDiffBytes = 8 << 20

// TaskDiff returns the changes in each repository the task cloned against
// its base commit: tracked and untracked files (ignored ones excepted), as
// unified diffs. The session resumes if it is Idle. The repository's own
// index is left alone (a temporary one is used).
func (c *Tasks) TaskDiff(ctx context.Context, taskID domain.TaskID) ([]RepoDiff, error) {
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return nil, err
	}
	repos, err := c.taskRepos(ctx, taskID)
	if err != nil {
		return nil, err
	}
	script := `set -e; cd "$1"; export GIT_INDEX_FILE=/tmp/engrams-diff-index.$$; rm -f "$GIT_INDEX_FILE"
trap 'rm -f "$GIT_INDEX_FILE"' EXIT
git read-tree "$2"; git add -A .; git -c core.quotepath=off diff --cached --no-color --binary "$2"`
	out := make([]RepoDiff, 0, len(repos))
	for _, r := range repos {
		res, err := c.guestRun(ctx, t.SessionID, guestapi.ExecRequest{
			Argv: []string{"/bin/sh", "-c", script, "sh", path.Join(WorkRoot, r.Path), r.Base}, TimeoutMS: 120000}, maxDiffBytes)
		if err != nil {
			return nil, fmt.Errorf("diff %s: %w", r.Path, err)
		}
		if res.ExitCode != 0 || res.Error != "" {
			return nil, fmt.Errorf("diff %s: exit %d %s: %s", r.Path, res.ExitCode, res.Error, bytes.TrimSpace(res.Stderr))
		}
		out = append(out, RepoDiff{Path: r.Path, URL: r.URL, Base: r.Base, Diff: string(res.Stdout)})
	}
	return out, nil
}

// TaskSession returns the session a task works in now.
func (c *Tasks) TaskSession(ctx context.Context, taskID domain.TaskID) (domain.Task, error) {
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return t, err
	}
	if t.SessionID == "" {
		return t, fmt.Errorf("%w: task %s has no session", domain.ErrNotActive, taskID)
	}
	return t, nil
}

// guestRun runs req to completion in a session's guest (resuming it when
// Idle), each output stream bounded by limit bytes.
func (c *Tasks) guestRun(ctx context.Context, sid domain.SessionID, req guestapi.ExecRequest, limit int) (guestapi.ExecResult, error) {
	gc, err := c.sessions.GuestClient(ctx, sid)
	if err != nil {
		return guestapi.ExecResult{}, err
	}
	res, err := gc.Run(ctx, req, limit)
	if err != nil {
		return res, fmt.Errorf("in session %s: %w", sid, err)
	}
	return res, nil
}

// guestUpload writes body as path in a session's guest.
func (c *Tasks) guestUpload(ctx context.Context, sid domain.SessionID, path string, mode uint32, body io.Reader) error {
	gc, err := c.sessions.GuestClient(ctx, sid)
	if err != nil {
		return err
	}
	if err := gc.Upload(ctx, path, mode, body); err != nil {
		return fmt.Errorf("in session %s: %w", sid, err)
	}
	return nil
}
