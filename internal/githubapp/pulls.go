package githubapp

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Branches pushes a task's changes as a branch (tasks.Pusher); a task
// that changed nothing is domain.ErrNothingChanged.
type Branches interface {
	PushBranch(ctx context.Context, taskID domain.TaskID, path, branch, message string) (domain.PushedBranch, error)
}

// PullRequest is a pull request opened from a task.
type PullRequest struct {
	URL    string
	Number int
	Branch string
	Commit string
}

// OpenTaskPR pushes a task's changes (in its repository at path, "" for
// its only one) as a branch and opens a pull request of it on repo
// (owner/name) that links back to the task. Asking again pushes the
// task's changes now to the same branch and answers the same pull request.
func (a *App) OpenTaskPR(ctx context.Context, taskID domain.TaskID, repo, title, path string) (PullRequest, error) {
	b := a.branches
	if b == nil {
		return PullRequest{}, fmt.Errorf("%w: this server cannot push tasks' branches", domain.ErrInvalid)
	}
	c, err := a.conf(ctx)
	if err != nil {
		return PullRequest{}, err
	}
	if !domain.ValidRepo(repo) {
		return PullRequest{}, fmt.Errorf("%w: repository %q: want owner/name", domain.ErrInvalid, connector.Clip(repo, 100))
	}
	if c, err = a.forRepo(ctx, c, repo); err != nil {
		return PullRequest{}, err
	}
	pushed, err := b.PushBranch(ctx, taskID, path, "", title)
	if err != nil {
		return PullRequest{}, err
	}
	owner := strings.Split(repo, "/")[0]
	var open []struct {
		Number  int    `json:"number"`
		HTMLURL string `json:"html_url"`
	}
	q := url.Values{"head": {owner + ":" + pushed.Branch}, "state": {"open"}}
	if err := a.rest(ctx, c, http.MethodGet, "/repos/"+repo+"/pulls?"+q.Encode(), nil, &open); err != nil {
		return PullRequest{}, err
	}
	if len(open) > 0 {
		return PullRequest{URL: open[0].HTMLURL, Number: open[0].Number, Branch: pushed.Branch, Commit: pushed.Commit}, nil
	}
	if title == "" {
		title = "Changes from engrams task " + string(taskID)
	}
	body := "Opened by engrams from task " + string(taskID) + "."
	if c.DashboardURL != "" {
		body = fmt.Sprintf("Opened by engrams from [task %s](%s/tasks/%s).", taskID, strings.TrimRight(c.DashboardURL, "/"), taskID)
	}
	var made struct {
		Number  int    `json:"number"`
		HTMLURL string `json:"html_url"`
	}
	if err := a.rest(ctx, c, http.MethodPost, "/repos/"+repo+"/pulls", map[string]string{"title": connector.Clip(title, 256), "head": pushed.Branch,
		"base": pushed.Base, "body": body}, &made); err != nil {
		return PullRequest{}, err
	}
	return PullRequest{URL: made.HTMLURL, Number: made.Number, Branch: pushed.Branch, Commit: pushed.Commit}, nil
}
