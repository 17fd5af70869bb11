package githubtest

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"testing"
	"time"
)

// Post is a review or a comment the fake holds.
type Post struct {
	ID       int64
	Body     string
	Event    string          // reviews: COMMENT, APPROVE, REQUEST_CHANGES
	Comments []InlineComment // reviews: inline comments
}

// InlineComment is one inline comment of a review.
type InlineComment struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Side string `json:"side"`
	Body string `json:"body"`
}

// Server is a fake GitHub REST API.
type Server struct {
	*httptest.Server
	token  string
	mu     sync.Mutex
	posts  map[string][]*Post // "owner/repo/pulls/N/reviews" or ".../issues/N/comments"
	prs    []PR
	minted int
	n      int64
	files  map[string]string // "owner/repo@ref:path"
}

// Start runs a fake GitHub that accepts token, until the test ends.
func Start(t testing.TB, token string) *Server {
	s := &Server{token: token, posts: map[string][]*Post{}, files: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/repos/{owner}/{repo}/pulls/{n}/reviews", s.handle)
	mux.HandleFunc("/repos/{owner}/{repo}/issues/{n}/comments", s.handle)
	mux.HandleFunc("/repos/{owner}/{repo}/pulls", s.pulls)
	mux.HandleFunc("GET /repos/{owner}/{repo}/contents/{path...}", s.contents)
	mux.HandleFunc("POST /app/installations/{id}/access_tokens", s.accessToken)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	key := strings.TrimPrefix(r.URL.Path, "/repos/")
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.Method {
	case http.MethodGet:
		out := []map[string]any{}
		for _, p := range s.posts[key] {
			out = append(out, map[string]any{"id": p.ID, "body": p.Body, "html_url": fmt.Sprintf("%s/%s#%d", s.URL, key, p.ID)})
		}
		_ = json.NewEncoder(w).Encode(out)
	case http.MethodPost:
		var in struct {
			Body     string          `json:"body"`
			Event    string          `json:"event"`
			Comments []InlineComment `json:"comments"`
		}
		b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err := json.Unmarshal(b, &in); err != nil || in.Body == "" {
			http.Error(w, `{"message":"Validation Failed"}`, http.StatusUnprocessableEntity)
			return
		}
		s.n++
		p := &Post{ID: s.n, Body: in.Body, Event: in.Event, Comments: in.Comments}
		s.posts[key] = append(s.posts[key], p)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": p.ID, "body": p.Body, "html_url": fmt.Sprintf("%s/%s#%d", s.URL, key, p.ID)})
	default:
		http.Error(w, "", http.StatusMethodNotAllowed)
	}
}

// Minted counts the installation tokens minted.
func (s *Server) Minted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.minted
}

// accessToken mints an installation token (the App's JWT is taken as it
// is: the fake checks only that there is one): the token the fake accepts.
func (s *Server) accessToken(w http.ResponseWriter, r *http.Request) {
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ey") {
		http.Error(w, `{"message":"A JSON web token could not be decoded"}`, http.StatusUnauthorized)
		return
	}
	s.mu.Lock()
	s.minted++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"token": s.token, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"permissions": map[string]string{"pull_requests": "write"}, "repositories": []map[string]string{{"name": "app"}}})
}

// PR is a pull request opened on the fake.
type PR struct {
	Repo, Title, Head, Base, Body string
	Number                        int
}

// PRs returns the pull requests opened.
func (s *Server) PRs() []PR {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]PR(nil), s.prs...)
}

func (s *Server) pulls(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	repo := r.PathValue("owner") + "/" + r.PathValue("repo")
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	out := func(p PR) map[string]any {
		return map[string]any{"number": p.Number, "html_url": fmt.Sprintf("%s/%s/pull/%d", s.URL, p.Repo, p.Number), "title": p.Title}
	}
	switch r.Method {
	case http.MethodGet:
		list := []map[string]any{}
		for _, p := range s.prs {
			if p.Repo == repo && r.PathValue("owner")+":"+p.Head == r.URL.Query().Get("head") {
				list = append(list, out(p))
			}
		}
		_ = json.NewEncoder(w).Encode(list)
	case http.MethodPost:
		var in struct{ Title, Head, Base, Body string }
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&in); err != nil || in.Head == "" || in.Base == "" || in.Title == "" {
			http.Error(w, `{"message":"Validation Failed"}`, http.StatusUnprocessableEntity)
			return
		}
		p := PR{Repo: repo, Title: in.Title, Head: in.Head, Base: in.Base, Body: in.Body, Number: len(s.prs) + 1}
		s.prs = append(s.prs, p)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(out(p))
	default:
		http.Error(w, "", http.StatusMethodNotAllowed)
	}
}

// SetFile gives repo a file at ref, as the contents API serves it.
func (s *Server) SetFile(repo, ref, path, content string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[repo+"@"+ref+":"+path] = content
}

// contents is GET /repos/OWNER/REPO/contents/PATH?ref=REF: the file, its
// content base64 in lines of 60 as GitHub sends it; a directory's
// listing (an array); 404 when none.
func (s *Server) contents(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	key := r.PathValue("owner") + "/" + r.PathValue("repo") + "@" + r.URL.Query().Get("ref") + ":" + r.PathValue("path")
	s.mu.Lock()
	text, ok := s.files[key]
	var dir []map[string]any // a directory's listing: its entries
	for k := range s.files {
		if rest, in := strings.CutPrefix(k, key+"/"); in {
			dir = append(dir, map[string]any{"type": "file", "name": rest, "path": r.PathValue("path") + "/" + rest})
		}
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !ok && len(dir) > 0 {
		_ = json.NewEncoder(w).Encode(dir)
		return
	}
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"message":"Not Found","documentation_url":"https://docs.github.com/rest/repos/contents#get-repository-content","status":"404"}`)
		return
	}
	enc := base64.StdEncoding.EncodeToString([]byte(text))
	var lines []string
	for len(enc) > 60 {
		lines, enc = append(lines, enc[:60]), enc[60:]
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "file", "encoding": "base64", "size": len(text), "name": path.Base(r.PathValue("path")),
		"path": r.PathValue("path"), "content": strings.Join(append(lines, enc), "\n") + "\n"})
}

// Reviews returns the reviews of a pull request.
func (s *Server) Reviews(repo string, n int) []Post {
	return s.list(fmt.Sprintf("%s/pulls/%d/reviews", repo, n))
}

// Comments returns the comments of an issue or pull request.
func (s *Server) Comments(repo string, n int) []Post {
	return s.list(fmt.Sprintf("%s/issues/%d/comments", repo, n))
}

func (s *Server) list(key string) []Post {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Post
	for _, p := range s.posts[key] {
		out = append(out, *p)
	}
	return out
}

// Sign is a delivery's X-Hub-Signature-256.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Deliver sends a signed webhook delivery to url, as GitHub does.
func Deliver(t testing.TB, url, secret, event, delivery string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	req.Header.Set("X-Hub-Signature-256", Sign(secret, body))
	req.Header.Set("User-Agent", "GitHub-Hookshot/test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// PullRequest is a pull_request event's body.
func PullRequest(action, repo string, number int, sha string) []byte {
	return PullRequestOf(PREvent{Action: action, Repo: repo, Number: number, SHA: sha})
}

// PREvent is a pull_request event's fields; empty ones take PullRequest's
// values (title "Fix the flaky test", branch fix into main, a MEMBER's:
// dev, user id DevID).
type PREvent struct {
	Action, Repo, SHA, Title, HeadRef, Author, Association string
	Number                                                 int
	AuthorID                                               int64     // zero: the login's (githubtest.DevID for dev)
	UpdatedAt                                              time.Time // zero: now
}

// DevID is the user id of the default author, dev.
const DevID = 1001

// userID is id, else login's: DevID for dev (""), else one made of the
// login, so each login is one account.
func userID(login string, id int64) int64 {
	if id != 0 {
		return id
	}
	if login == "" || login == "dev" {
		return DevID
	}
	h := fnv.New32a()
	h.Write([]byte(login))
	return 1<<20 + int64(h.Sum32()%(1<<20))
}

// PullRequestOf is a pull_request event's body with p's fields.
func PullRequestOf(p PREvent) []byte {
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	b, _ := json.Marshal(map[string]any{"action": p.Action, "number": p.Number,
		"pull_request": map[string]any{"number": p.Number, "title": or(p.Title, "Fix the flaky test"), "body": "It raced.",
			"html_url":           "https://github.test/" + p.Repo + "/pull/1",
			"user":               map[string]any{"login": or(p.Author, "dev"), "id": userID(p.Author, p.AuthorID), "type": "User"},
			"author_association": or(p.Association, "MEMBER"), "head": map[string]any{"sha": p.SHA, "ref": or(p.HeadRef, "fix")},
			"updated_at": cmp.Or(p.UpdatedAt, time.Now()).UTC().Format(time.RFC3339),
			"base":       map[string]any{"ref": "main"}},
		"repository": map[string]any{"full_name": p.Repo}, "sender": map[string]any{"login": or(p.Author, "dev")}})
	return b
}

// IssueComment is an issue_comment event's body on a pull request, by dev.
func IssueComment(repo string, number int, body, association string) []byte {
	return IssueCommentOf(CommentEvent{Repo: repo, Number: number, Body: body, Association: association})
}

// CommentEvent is an issue_comment event's fields; empty ones take
// IssueComment's values (by dev, user id DevID, a User; comment id 1, on
// a pull request); another author's id is made of their login.
type CommentEvent struct {
	Repo, Body, Association, Author, AuthorType string
	Number                                      int
	AuthorID, ID                                int64
	OnIssue                                     bool // on an issue, not a pull request
}

// IssueCommentOf is an issue_comment event's body with c's fields.
func IssueCommentOf(c CommentEvent) []byte {
	issue := map[string]any{"number": c.Number, "title": "Fix the flaky test"}
	if !c.OnIssue {
		issue["pull_request"] = map[string]any{"url": "x"}
	}
	by := map[string]any{"login": cmp.Or(c.Author, "dev"), "id": userID(c.Author, c.AuthorID), "type": cmp.Or(c.AuthorType, "User")}
	b, _ := json.Marshal(map[string]any{"action": "created", "issue": issue,
		"comment":    map[string]any{"id": cmp.Or(c.ID, 1), "body": c.Body, "user": by, "author_association": c.Association},
		"repository": map[string]any{"full_name": c.Repo}, "sender": by})
	return b
}
