package api_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/coordinator"
	"github.com/engrams/engrams/internal/tasks"
)

// TestChangeFeed: a notification of a followed topic is one message of
// that topic; others are not sent; a bad topic is 400.
func TestChangeFeed(t *testing.T) {
	t.Parallel()
	if api.TopicTasks != tasks.TopicTasks {
		t.Fatalf("api.TopicTasks %q, tasks.TopicTasks %q", api.TopicTasks, tasks.TopicTasks)
	}
	a := newTaskAPI(t)
	srv := httptest.NewServer(a.h)
	t.Cleanup(srv.Close)
	for _, q := range []string{"", "topics=", "topics=tasks,ops"} {
		if rec := a.do("GET", "/v1/changes?"+q, ""); rec.Code != 400 {
			t.Errorf("GET /v1/changes?%s: %d %s, want 400", q, rec.Code, rec.Body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/changes?topics=tasks,sessions", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("follow: %v %v", resp, err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	next := func() string {
		for lines.Scan() {
			if l := lines.Text(); strings.HasPrefix(l, "event: ") {
				return strings.TrimPrefix(l, "event: ")
			}
		}
		return "(stream ended: " + ctx.Err().Error() + ")"
	}
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), ": following") {
		t.Fatalf("first line %q", lines.Text())
	}
	for _, topic := range []string{coordinator.TopicHosts, tasks.TopicTasks, coordinator.TopicSessions} {
		if err := a.st.Notify(ctx, topic); err != nil {
			t.Fatal(err)
		}
		if topic == coordinator.TopicHosts {
			continue // not followed: nothing is sent
		}
		if got := next(); got != topic {
			t.Fatalf("after notifying %s: event %q", topic, got)
		}
	}
}
