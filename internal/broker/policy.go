package broker

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/engrams/engrams/internal/domain"
)

// What a grant lets a request do, judged on the request line as the guest
// sent it: its method and its raw target. Anything ambiguous is refused,
// never normalised: the upstream must see exactly the path judged.

// hostRole is what a brokered host serves the grant's repositories by.
type hostRole struct {
	git      bool     // git smart HTTP at /{path}[.git]/…
	rest     []string // the REST API's repository prefix ("repos", or "api", "v3", "repos"); nil: none
	foldCase bool     // owner and name compare case-insensitively (GitHub's)
}

// roleOf is name's role: github.com serves git (its API is
// api.github.com's, which serves only the API); any other host both, its
// API under /api/v3 as GitHub Enterprise Server's is.
func roleOf(name string) hostRole {
	switch name {
	case "github.com":
		return hostRole{git: true, foldCase: true}
	case "api.github.com":
		return hostRole{rest: []string{"repos"}, foldCase: true}
	}
	return hostRole{git: true, rest: []string{"api", "v3", "repos"}}
}

// allowed is a request the grant allows: the repository it is for, and
// what it does there (for the record).
type allowed struct {
	repo domain.RepoAccess
	what string
}

// errNotGranted says why a request is refused; every refusal wraps it.
var errNotGranted = errors.New("not in the session's grant")

// judge decides whether a request with method and raw target (the
// request line's, as sent) may go to a host of role under grant.
func judge(grant []domain.RepoAccess, role hostRole, method, target string) (allowed, error) {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return allowed{}, fmt.Errorf("%w: the method %.20q is never brokered", errNotGranted, method)
	}
	segs, query, err := splitTarget(target)
	if err != nil {
		return allowed{}, err
	}
	for _, a := range grant {
		if !a.Valid() {
			continue
		}
		repo := strings.Split(a.Path[1:], "/")
		if role.git {
			if rest, ok := underRepo(segs, repo, role.foldCase, true); ok {
				return judgeGit(a, method, rest, query)
			}
		}
		if role.rest != nil && hasPrefix(segs, role.rest, false) {
			if rest, ok := underRepo(segs[len(role.rest):], repo, role.foldCase, false); ok {
				return judgeREST(a, method, rest)
			}
		}
	}
	return allowed{}, fmt.Errorf("%w: not a path of a repository the session was granted", errNotGranted)
}

// splitTarget splits an origin-form target into its path's elements and
// its raw query, refusing what could be read two ways: no "/" first, an
// empty, "." or ".." element, a backslash, a fragment, a byte outside
// printable ASCII, and an escape of "/", ".", "\", "%" or a control
// character (or a malformed one).
func splitTarget(target string) (segs []string, query string, err error) {
	path, query, _ := strings.Cut(target, "?")
	if !strings.HasPrefix(path, "/") {
		return nil, "", fmt.Errorf("%w: only a path from / is brokered", errNotGranted)
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= ' ' || c >= 0x7f || c == '\\' || c == '#' {
			return nil, "", fmt.Errorf("%w: a target with %q in it is refused", errNotGranted, c)
		}
	}
	for rest := path; strings.Contains(rest, "%"); {
		i := strings.IndexByte(rest, '%')
		if i+2 >= len(rest) || unhex(rest[i+1]) < 0 || unhex(rest[i+2]) < 0 {
			return nil, "", fmt.Errorf("%w: a malformed escape in the path", errNotGranted)
		}
		if c := unhex(rest[i+1])<<4 | unhex(rest[i+2]); c < 0x20 || c == 0x7f || c == '/' || c == '.' || c == '\\' || c == '%' {
			return nil, "", fmt.Errorf("%w: an escaped %q in the path is refused", errNotGranted, rune(c))
		}
		rest = rest[i+3:]
	}
	segs = strings.Split(path[1:], "/")
	for _, s := range segs {
		if s == "" || s == "." || s == ".." {
			return nil, "", fmt.Errorf("%w: an empty, . or .. element in the path is refused", errNotGranted)
		}
	}
	return segs, query, nil
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// hasPrefix reports whether segs starts with prefix.
func hasPrefix(segs, prefix []string, fold bool) bool {
	if len(segs) < len(prefix) {
		return false
	}
	for i, p := range prefix {
		if !(segs[i] == p || fold && strings.EqualFold(segs[i], p)) {
			return false
		}
	}
	return true
}

// underRepo returns what segs name below repo's elements (the last one
// with ".git" too when dotGit).
func underRepo(segs, repo []string, fold, dotGit bool) ([]string, bool) {
	if len(segs) < len(repo) {
		return nil, false
	}
	last := len(repo) - 1
	if hasPrefix(segs, repo, fold) {
		return segs[len(repo):], true
	}
	if !dotGit || !hasPrefix(segs[:last], repo[:last], fold) {
		return nil, false
	}
	if name, ok := strings.CutSuffix(segs[last], ".git"); ok && (name == repo[last] || fold && strings.EqualFold(name, repo[last])) {
		return segs[len(repo):], true
	}
	return nil, false
}

// judgeGit allows git's smart HTTP: the ref advertisement and the pack
// exchange of upload-pack (fetch), and of receive-pack (push) when the
// repository grants push. The query is the one service parameter or none.
func judgeGit(a domain.RepoAccess, method string, rest []string, query string) (allowed, error) {
	service := ""
	switch {
	case method == http.MethodGet && slices.Equal(rest, []string{"info", "refs"}) && strings.HasPrefix(query, "service="):
		service = strings.TrimPrefix(query, "service=")
	case method == http.MethodPost && len(rest) == 1 && query == "":
		service = rest[0]
	}
	switch {
	case service == "git-upload-pack":
		return allowed{repo: a, what: "git fetch"}, nil
	case service == "git-receive-pack" && a.Push:
		return allowed{repo: a, what: "git push"}, nil
	case service == "git-receive-pack":
		return allowed{}, fmt.Errorf("%w: %s grants no push", errNotGranted, a.Path)
	}
	return allowed{}, fmt.Errorf("%w: not a git fetch or push of %s", errNotGranted, a.Path)
}

// judgeREST allows the repository's REST API when it grants API use:
// reads of anything but the never-list, and with push the writes of
// restWrites.
func judgeREST(a domain.RepoAccess, method string, rest []string) (allowed, error) {
	switch {
	case !a.API:
		return allowed{}, fmt.Errorf("%w: %s grants no API use", errNotGranted, a.Path)
	case restNever(rest):
		return allowed{}, fmt.Errorf("%w: the repository's %s are never brokered", errNotGranted, rest[0])
	case method == http.MethodGet || method == http.MethodHead:
		return allowed{repo: a, what: "API read"}, nil
	case !a.Push:
		return allowed{}, fmt.Errorf("%w: %s grants no push, so no API writes", errNotGranted, a.Path)
	}
	for _, w := range restWrites() {
		if w.method == method && matchPattern(strings.Split(w.pattern, "/"), rest) {
			return allowed{repo: a, what: "API write"}, nil
		}
	}
	return allowed{}, fmt.Errorf("%w: %s of this part of the repository is not an API write the broker allows", errNotGranted, method)
}

// restNever are the parts of a repository no grant reaches, read or
// write: its hooks, deploy keys, collaborators and invitations, and every
// kind of secret and variable.
func restNever(rest []string) bool {
	if len(rest) == 0 {
		return false
	}
	switch strings.ToLower(rest[0]) {
	case "hooks", "keys", "collaborators", "invitations", "environments", "dependabot", "codespaces", "secret-scanning":
		return true
	case "actions":
		return len(rest) > 1 && (strings.EqualFold(rest[1], "secrets") || strings.EqualFold(rest[1], "variables") ||
			strings.EqualFold(rest[1], "permissions") || strings.EqualFold(rest[1], "runners"))
	}
	return false
}

// restWrite is one API write an agent may make with push: a method and a
// path below the repository, "#" one number, "*" one element, "**" one
// or more.
type restWrite struct {
	method, pattern string
}

// restWrites are the writes brokered for a repository granting push and
// API use: pull requests and their reviews and comments, issues and their
// comments and labels, commit statuses, check runs, git objects and refs,
// and file contents. Never the repository itself (its settings, deletion,
// transfer), merges, or anything of restNever.
func restWrites() []restWrite {
	return []restWrite{
		{http.MethodPost, "pulls"}, {http.MethodPatch, "pulls/#"},
		{http.MethodPost, "pulls/#/comments"}, {http.MethodPost, "pulls/#/comments/#/replies"}, {http.MethodPatch, "pulls/comments/#"},
		{http.MethodPost, "pulls/#/reviews"}, {http.MethodPost, "pulls/#/reviews/#/events"}, {http.MethodPut, "pulls/#/reviews/#"},
		{http.MethodPost, "issues"}, {http.MethodPatch, "issues/#"}, {http.MethodPost, "issues/#/comments"},
		{http.MethodPatch, "issues/comments/#"}, {http.MethodPost, "issues/#/labels"},
		{http.MethodPost, "statuses/*"}, {http.MethodPost, "check-runs"}, {http.MethodPatch, "check-runs/#"},
		{http.MethodPost, "git/blobs"}, {http.MethodPost, "git/trees"}, {http.MethodPost, "git/commits"}, {http.MethodPost, "git/tags"},
		{http.MethodPost, "git/refs"}, {http.MethodPatch, "git/refs/**"}, {http.MethodDelete, "git/refs/**"},
		{http.MethodPut, "contents/**"}, {http.MethodDelete, "contents/**"},
	}
}

// matchPattern matches path elements against a restWrite pattern.
func matchPattern(pat, segs []string) bool {
	for i, p := range pat {
		switch {
		case p == "**":
			return len(segs) > i
		case i >= len(segs):
			return false
		case p == "#":
			if strings.Trim(segs[i], "0123456789") != "" {
				return false
			}
		case p != "*" && p != segs[i]:
			return false
		}
	}
	return len(segs) == len(pat)
}
