package githubapp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// maxResponse bounds a REST answer.
const maxResponse = 4 << 20

// marker is hidden in the body of what engrams posts, so a post made
// before a crash is found instead of made twice.
func marker(key string) string { return "<!-- engrams:" + key + " -->" }

func (a *App) rest(ctx context.Context, c conf, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.APIURL+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return fmt.Errorf("github %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil || len(b) > maxResponse {
		return fmt.Errorf("github %s %s: the answer is unreadable or over %d bytes", method, path, maxResponse)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(b, &e)
		return &apiError{method: method, path: path, status: resp.StatusCode, message: connector.Clip(e.Message, 200)}
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// apiError is GitHub's refusal of a call.
type apiError struct {
	method, path, message string
	status                int
}

func (e *apiError) Error() string {
	return fmt.Sprintf("github %s %s: %d %s", e.method, e.path, e.status, e.message)
}

// target is the REST path of a pull request's comments ("issues") or
// reviews ("pulls"): /repos/OWNER/NAME/KIND/N/WHAT.
func target(repo, number, kind, what string) (string, error) {
	n, err := strconv.Atoi(strings.TrimSpace(number))
	if !domain.ValidRepo(repo) || err != nil || n <= 0 {
		return "", fmt.Errorf("want a repository owner/name and a pull request number, not %q #%q", connector.Clip(repo, 100), connector.Clip(number, 20))
	}
	return fmt.Sprintf("/repos/%s/%s/%d/%s", repo, kind, n, what), nil
}

// posted is what engrams reads of a comment or review.
type posted struct {
	ID      int64  `json:"id"`
	Body    string `json:"body"`
	HTMLURL string `json:"html_url"`
}

// find looks for a post carrying key's marker.
func (a *App) find(ctx context.Context, c conf, path, key string) (posted, bool, error) {
	var list []posted
	if err := a.rest(ctx, c, http.MethodGet, path+"?per_page=100", nil, &list); err != nil {
		return posted{}, false, err
	}
	for _, p := range list {
		if strings.Contains(p.Body, marker(key)) {
			return p, true, nil
		}
	}
	return posted{}, false, nil
}

// Comment posts a comment on a pull request (or issue) once per key.
func (a *App) Comment(ctx context.Context, repo, number, text, key string) (string, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	path, err := target(repo, number, "issues", "comments")
	if err != nil {
		return "", err
	}
	if c, err = a.forRepo(ctx, c, repo); err != nil {
		return "", err
	}
	if p, ok, err := a.find(ctx, c, path, key); err != nil || ok {
		return p.HTMLURL, err
	}
	var out posted
	err = a.rest(ctx, c, http.MethodPost, path, map[string]string{"body": connector.Clip(text, 60000) + "\n\n" + marker(key)}, &out)
	return out.HTMLURL, err
}

// inlineRE is one line of a review's inline comments: path:line: text.
var inlineRE = regexp.MustCompile("^\\s*(?:[-*]\\s+)?`?([A-Za-z0-9_./-]+):(\\d+)`?:\\s+(.+)$")

// reviewComment is one inline comment of a review.
type reviewComment struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Side string `json:"side"`
	Body string `json:"body"`
}

// parseReview splits an agent's review: lines "path:line: text" are
// inline comments (at most 50), the rest the review's body.
func parseReview(text string) (string, []reviewComment) {
	var body []string
	var comments []reviewComment
	for _, l := range strings.Split(text, "\n") {
		if m := inlineRE.FindStringSubmatch(l); m != nil && len(comments) < 50 {
			n, _ := strconv.Atoi(m[2])
			if n > 0 {
				comments = append(comments, reviewComment{Path: m[1], Line: n, Side: "RIGHT", Body: connector.Clip(m[3], 4000)})
				continue
			}
		}
		body = append(body, l)
	}
	return strings.TrimSpace(strings.Join(body, "\n")), comments
}

// Review posts one review of a pull request, with its inline comments,
// once per key.
func (a *App) Review(ctx context.Context, repo, number, text, key string) (string, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return "", err
	}
	path, err := target(repo, number, "pulls", "reviews")
	if err != nil {
		return "", err
	}
	if c, err = a.forRepo(ctx, c, repo); err != nil {
		return "", err
	}
	if p, ok, err := a.find(ctx, c, path, key); err != nil || ok {
		return p.HTMLURL, err
	}
	body, comments := parseReview(text)
	if body == "" {
		body = "Review by engrams."
	}
	var out posted
	err = a.rest(ctx, c, http.MethodPost, path, map[string]any{"body": connector.Clip(body, 60000) + "\n\n" + marker(key), "event": "COMMENT",
		"comments": comments}, &out)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s (%d inline comments)", out.HTMLURL, len(comments)), nil
}
