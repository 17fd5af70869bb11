package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/domain"
)

// PushedBranch is a task's changes pushed as a branch.
type PushedBranch = domain.PushedBranch

// Pusher pushes tasks' changes as branches (over the Tasks' repositories
// and credentials).
type Pusher struct{ c *Tasks }

// NewPusher returns the Pusher of tasks.
func NewPusher(t *Tasks) *Pusher { return &Pusher{c: t} }

// ErrNothingChanged is PushBranch's refusal of a task that changed
// nothing (an invalid request: there is no branch to push).
var ErrNothingChanged = domain.ErrNothingChanged

var branchRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,100}$`)

// PushBranch pushes a task's changes in one of its repositories (repoPath;
// "" for its only one) as branch (default engrams/task-<id>): the
// repository is cloned again on the coordinator at the task's base commit,
// the task's diff applied and committed, and the branch pushed with the
// repository's credential, which never enters the VM. Pushing again
// replaces the branch with the task's changes now.
func (p *Pusher) PushBranch(ctx context.Context, taskID domain.TaskID, path, branch, message string) (PushedBranch, error) {
	c := p.c
	t, err := c.st.GetTask(ctx, taskID)
	if err != nil {
		return PushedBranch{}, err
	}
	if branch == "" {
		branch = "engrams/task-" + strings.SplitN(string(taskID), "-", 2)[0]
	}
	if !branchRE.MatchString(branch) || strings.Contains(branch, "..") {
		return PushedBranch{}, fmt.Errorf("%w: branch %q: want letters, digits and ._/- (at most 100)", domain.ErrInvalid, branch)
	}
	diffs, err := c.TaskDiff(ctx, taskID)
	if err != nil {
		return PushedBranch{}, err
	}
	var d *RepoDiff
	for i := range diffs {
		if diffs[i].Path == path || (path == "" && len(diffs) == 1) {
			d = &diffs[i]
		}
	}
	if d == nil {
		return PushedBranch{}, fmt.Errorf("%w: task %s has no repository %q (it cloned %d)", domain.ErrInvalid, taskID, path, len(diffs))
	}
	if d.Diff == "" {
		return PushedBranch{}, fmt.Errorf("task %s in %s: %w", taskID, d.Path, ErrNothingChanged)
	}
	var rec taskRecord
	if err := json.Unmarshal(t.Receipt, &rec); err != nil {
		return PushedBranch{}, fmt.Errorf("read task %s's profile: %w", taskID, err)
	}
	var repo apiv1.ProfileRepo
	for _, r := range rec.Spec.Repos {
		if repoPath(r) == d.Path {
			repo = r
		}
	}
	if message == "" {
		message = t.Title
	}
	return p.push(ctx, t.Owner.OrgID, repo, rec.Spec.Repos, *d, branch, message)
}

func (p *Pusher) push(ctx context.Context, org domain.OrgID, r apiv1.ProfileRepo, all []apiv1.ProfileRepo, d RepoDiff, branch, message string) (PushedBranch, error) {
	c := p.c
	ctx, cancel := context.WithTimeout(ctx, cloneTimeout)
	defer cancel()
	tmp, err := os.MkdirTemp("", "engrams-push-")
	if err != nil {
		return PushedBranch{}, err
	}
	defer os.RemoveAll(tmp)
	env, err := c.gitEnv(ctx, org, r, all, tmp)
	if err != nil {
		return PushedBranch{}, err
	}
	work := filepath.Join(tmp, "repo")
	args := []string{"clone", "--quiet", "--no-hardlinks"}
	if r.Ref != "" {
		args = append(args, "--branch", r.Ref)
	}
	if out, err := git(ctx, tmp, env, append(args, "--", r.URL, work)...); err != nil {
		return PushedBranch{}, fmt.Errorf("clone %s: %w: %s", r.URL, err, out)
	}
	base := r.Ref
	if base == "" {
		head, err := git(ctx, work, env, "symbolic-ref", "--short", "refs/remotes/origin/HEAD")
		if err != nil {
			return PushedBranch{}, fmt.Errorf("find %s's default branch: %w: %s", r.URL, err, head)
		}
		base = strings.TrimPrefix(head, "origin/")
	}
	ident := []string{"-c", "user.name=engrams", "-c", "user.email=engrams@localhost"}
	if out, err := git(ctx, work, env, "checkout", "--quiet", "-B", branch, d.Base); err != nil {
		return PushedBranch{}, fmt.Errorf("check out the task's base %s: %w: %s", d.Base, err, out)
	}
	apply := exec.CommandContext(ctx, "git", "apply", "--binary", "--index", "-")
	apply.Dir, apply.Env, apply.Stdin = work, env, strings.NewReader(d.Diff)
	if out, err := apply.CombinedOutput(); err != nil {
		return PushedBranch{}, fmt.Errorf("apply the task's changes: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if out, err := git(ctx, work, env, append(ident, "commit", "--quiet", "-m", message)...); err != nil {
		return PushedBranch{}, fmt.Errorf("commit: %w: %s", err, out)
	}
	commit, err := git(ctx, work, env, "rev-parse", "HEAD")
	if err != nil {
		return PushedBranch{}, fmt.Errorf("read the commit: %w", err)
	}
	if out, err := git(ctx, work, env, "push", "--quiet", "--force", "origin", "HEAD:refs/heads/"+branch); err != nil {
		return PushedBranch{}, fmt.Errorf("push %s to %s: %w: %s", branch, r.URL, err, out)
	}
	c.log.Info("task branch pushed", "repo", r.URL, "branch", branch, "commit", commit)
	return PushedBranch{RepoPath: d.Path, URL: r.URL, Branch: branch, Base: base, Commit: commit}, nil
}
