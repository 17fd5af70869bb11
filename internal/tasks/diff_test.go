package tasks

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

func TestTaskDiff(t *testing.T) {
	t.Parallel()
	const patch = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	tests := []struct {
		name    string
		repos   []map[string]any // repo_cloned events
		answer  func(req guestapi.ExecRequest) []guestapi.StreamFrame
		want    []RepoDiff
		wantErr string
	}{
		{name: "no repositories", want: []RepoDiff{}},
		{name: "two repositories",
			repos: []map[string]any{{"path": "app", "url": "https://h/app.git", "base": "b1"}, {"path": "lib", "url": "https://h/lib", "ref": "main", "base": "b2"}},
			answer: func(req guestapi.ExecRequest) []guestapi.StreamFrame {
				if req.Argv[len(req.Argv)-2] == "/work/lib" {
					return []guestapi.StreamFrame{{Type: "exit"}} // unchanged
				}
				return []guestapi.StreamFrame{{Type: "stdout", Data: []byte(patch[:20])}, {Type: "stderr", Data: []byte("warning")},
					{Type: "stdout", Data: []byte(patch[20:])}, {Type: "exit"}}
			},
			want: []RepoDiff{{Path: "app", URL: "https://h/app.git", Base: "b1", Diff: patch}, {Path: "lib", URL: "https://h/lib", Base: "b2"}}},
		{name: "git fails", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "stderr", Data: []byte("fatal: bad object b1\n")}, {Type: "exit", ExitCode: 128}}
			},
			wantErr: "diff app: exit 128 : fatal: bad object b1"},
		{name: "the guest cannot run it", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "exit", ExitCode: -1, Error: "timed out"}}
			},
			wantErr: "diff app: exit -1 timed out"},
		{name: "output without an exit", repos: []map[string]any{{"path": "app", "url": "u", "base": "b1"}},
			answer: func(guestapi.ExecRequest) []guestapi.StreamFrame {
				return []guestapi.StreamFrame{{Type: "stdout", Data: []byte("x")}}
			},
			wantErr: "without an exit frame"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newTaskEnv(t)
			ctx := context.Background()
			e.guest.answer = tt.answer
			e.session(t, "s1", "host-a", domain.SessionActive, domain.SessionSpec{})
			e.task(t, "t1", "s1", domain.TaskIdle, "")
			for _, r := range tt.repos {
				if _, err := e.co.appendTaskEvents(ctx, "t1", taskEvent(TaskEventRepoCloned, r), taskEvent(TaskEventPrompt, map[string]any{"text": "x"})); err != nil {
					t.Fatal(err)
				}
			}
			got, err := e.co.TaskDiff(ctx, "t1")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("diff = %+v, %v; want %+v", got, err, tt.want)
			}
			calls := e.guest.got()
			if len(calls) != len(tt.repos) {
				t.Fatalf("%d guest calls, want %d", len(calls), len(tt.repos))
			}
			for i, c := range calls {
				argv := c.Req.Argv
				if c.HostID != "host-a" || c.Path != "/v1/machines/s1/guest"+guestapi.PathExecRun || len(argv) != 6 || argv[0] != "/bin/sh" ||
					argv[4] != "/work/"+tt.repos[i]["path"].(string) || argv[5] != tt.repos[i]["base"] || !strings.Contains(argv[2], "GIT_INDEX_FILE") {
					t.Errorf("guest call %d: %+v", i, c)
				}
			}
		})
	}
	e := newTaskEnv(t)
	if _, err := e.co.TaskDiff(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("diff of an unknown task: %v", err)
	}
}

func TestTaskSession(t *testing.T) {
	t.Parallel()
	e := newTaskEnv(t)
	e.task(t, "t1", "s1", domain.TaskIdle, "")
	e.task(t, "t2", "", domain.TaskStarting, "")
	if tk, err := e.co.TaskSession(context.Background(), "t1"); err != nil || tk.SessionID != "s1" {
		t.Errorf("t1: %+v %v", tk, err)
	}
	if _, err := e.co.TaskSession(context.Background(), "t2"); !errors.Is(err, domain.ErrNotActive) {
		t.Errorf("t2 without a session: %v", err)
	}
	if _, err := e.co.TaskSession(context.Background(), "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("unknown: %v", err)
	}
}
