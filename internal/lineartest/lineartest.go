package lineartest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a fake Linear GraphQL API at /graphql.
type Server struct {
	*httptest.Server
	key      string
	mu       sync.Mutex
	comments map[string][]string // issue id -> comment bodies
}

// Start runs a fake Linear that accepts the API key, until the test ends.
func Start(t testing.TB, key string) *Server {
	s := &Server{key: key, comments: map[string][]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.graphql))
	t.Cleanup(s.Close)
	return s
}

// URL of the GraphQL endpoint.
func (s *Server) APIURL() string { return s.URL + "/graphql" }

// Comments returns an issue's comments.
func (s *Server) Comments(issue string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.comments[issue]...)
}

func (s *Server) graphql(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != s.key {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"errors":[{"message":"Authentication required"}]}`)
		return
	}
	var req struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case strings.Contains(req.Query, "commentCreate"):
		in, _ := req.Variables["input"].(map[string]any)
		issue, _ := in["issueId"].(string)
		body, _ := in["body"].(string)
		s.comments[issue] = append(s.comments[issue], body)
		id := fmt.Sprintf("comment-%d", len(s.comments[issue]))
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"commentCreate": map[string]any{"success": true, "comment": map[string]any{"id": id}}}})
	case strings.Contains(req.Query, "issue(id"):
		issue, _ := req.Variables["id"].(string)
		var nodes []map[string]any
		for i, b := range s.comments[issue] {
			nodes = append(nodes, map[string]any{"id": fmt.Sprintf("comment-%d", i+1), "body": b})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"issue": map[string]any{"comments": map[string]any{"nodes": nodes}}}})
	default:
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"message": "unknown query"}}})
	}
}

// Sign is a delivery's Linear-Signature.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// IssueEvent is an Issue delivery: action create, or update with the
// labels it had before (labelsBefore non-nil).
func IssueEvent(action, id string, labels map[string]string, labelsBefore []string, at time.Time) []byte {
	return IssueEventBy("", action, id, labels, labelsBefore, at)
}

// IssueEventBy is IssueEvent done by the Linear user user (the delivery's
// actor, and a created issue's creator); "" for none.
func IssueEventBy(user, action, id string, labels map[string]string, labelsBefore []string, at time.Time) []byte {
	var ls []map[string]string
	for lid, name := range labels {
		ls = append(ls, map[string]string{"id": lid, "name": name})
	}
	m := map[string]any{"action": action, "type": "Issue", "webhookTimestamp": at.UnixMilli(),
		"data": map[string]any{"id": id, "identifier": "ENG-42", "title": "Flaky test", "description": "It fails one run in ten.",
			"url": "https://linear.test/ENG-42", "labels": ls}}
	if labelsBefore != nil {
		m["updatedFrom"] = map[string]any{"labelIds": labelsBefore}
	}
	if user != "" {
		m["actor"] = map[string]any{"id": user, "type": "user", "name": user, "email": user + "@example.com"}
		if action == "create" {
			m["data"].(map[string]any)["creatorId"] = user
		}
	}
	b, _ := json.Marshal(m)
	return b
}

// CommentEvent is a Comment delivery: user's comment id, saying body, on
// issue, created at.
func CommentEvent(user, id, issue, body string, at time.Time) []byte {
	b, _ := json.Marshal(map[string]any{"action": "create", "type": "Comment", "webhookTimestamp": at.UnixMilli(),
		"actor": map[string]any{"id": user, "type": "user", "name": user, "email": user + "@example.com"},
		"data": map[string]any{"id": id, "body": body, "issueId": issue, "userId": user, "createdAt": at.UTC().Format(time.RFC3339),
			"updatedAt": at.UTC().Format(time.RFC3339)}})
	return b
}

// Deliver sends a signed delivery to url.
func Deliver(t testing.TB, url, secret, delivery string, body []byte) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Linear-Signature", Sign(secret, body))
	req.Header.Set("Linear-Delivery", delivery)
	req.Header.Set("Linear-Event", "Issue")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
