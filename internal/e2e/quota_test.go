package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/metrics"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/tasks"
)

// floodPrompt makes the shell harness's agent hostile: it finds the
// harness (the lowest pid running its script; its forks share the command
// line) and writes n lines of the harness protocol straight into the pipe
// the adapter reads, each one an event of the turn.
func floodPrompt(n int) string {
	return fmt.Sprintf(`h=$(grep -l 'engrams-shell-harnes[s]' /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 | sort -n | head -n 1); `+
		`yes '{"type":"prompt","text":"flood"}' | head -n %d > /proc/$h/fd/1; echo flooded`, n)
}

// TestTaskFloodDoesNotBlockSend: a guest floods its task with events far
// over the task's rate (a real harness in a QEMU guest, the real relay and
// coordinator). The task gets one note, the flood is dropped, the user's
// follow-up sent meanwhile is recorded and runs in the guest, and once the
// relay has caught up the task answers again.
func TestTaskFloodDoesNotBlockSend(t *testing.T) {
	t.Parallel()
	reg := metrics.New()
	a := startAgentEnv(t, shellCase, func(c *server.Config, d *server.Deps) {
		c.Tasks.Quotas = tasks.Quotas{Rate: 20, Burst: 100}
		d.Metrics = reg
	})
	ctx := context.Background()
	a.profile(t, "flood", shellCase, "")
	const flood = 5000
	started := time.Now()
	task, err := a.c.Tasks().Start(ctx, apiv1.StartTaskRequest{Profile: "flood", Prompt: floodPrompt(flood)})
	if err != nil {
		t.Fatalf("start task: %v", err)
	}
	note := waitQuotaNote(t, a.c, task.ID, 10*time.Minute)
	t.Logf("start -> the rate's note %s (task event %d)", time.Since(started), note.Seq)

	sentAt := time.Now()
	sent, err := a.c.Tasks().Send(ctx, task.ID, "echo after-flood > /tmp/after-flood")
	took := time.Since(sentAt)
	if err != nil || sent.Type != "prompt" {
		t.Fatalf("send during the flood: %+v %v", sent, err)
	}
	cur, err := a.c.Tasks().Get(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Minute, "the follow-up ran in the guest", func() (bool, string) {
		out, code := guestRun(ctx, a.c, cur.SessionID, "cat", "/tmp/after-flood")
		return code == 0 && out == "after-flood\n", fmt.Sprintf("exit %d %q", code, out)
	})
	ran := time.Since(sentAt)
	waitCaughtUp(t, a, domain.TaskID(task.ID), domain.SessionID(cur.SessionID))
	caughtUp := time.Since(started)

	second, err := a.c.Tasks().Send(ctx, task.ID, "echo second-answer")
	if err != nil {
		t.Fatalf("send after the flood: %v", err)
	}
	if evs, _ := waitTurn(t, a.c, task.ID, second.Seq, 5*time.Minute); !hasEvent(evs, "tool_result", "second-answer") {
		t.Fatalf("no answer to the follow-up after the flood among %d events", len(evs))
	}
	checkFloodDropped(t, a, task.ID, reg, flood)
	t.Logf("send during a flood of %d events took %s; it ran in the guest %s after it was sent; the relay caught up %s after start",
		flood, took, ran, caughtUp)
}

// waitQuotaNote follows a task until its note of the rate quota.
func waitQuotaNote(t *testing.T, c *client.Client, id string, limit time.Duration) apiv1.TaskEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var note apiv1.TaskEvent
	err := c.Tasks().Events(ctx, id, 0, true, func(e apiv1.TaskEvent) error {
		var d struct{ Kind, Quota string }
		_ = json.Unmarshal(e.Data, &d)
		switch {
		case e.Type == "error" && d.Kind == tasks.QuotaErrorKind && d.Quota == store.QuotaRate:
			note = e
			return client.ErrStopFollowing
		case e.Type == "setup_failed":
			return fmt.Errorf("setup failed: %s", e.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("wait for the rate note of task %s: %v", id, err)
	}
	return note
}

// guestRun runs argv in a session and returns its stdout and exit code
// (-1 when it could not run).
func guestRun(ctx context.Context, c *client.Client, sessionID string, argv ...string) (string, int) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out bytes.Buffer
	code, err := c.Sessions().Exec(ctx, sessionID, apiv1.ExecRequest{Argv: argv}, &out, io.Discard)
	if err != nil {
		return err.Error(), -1
	}
	return out.String(), code
}

// waitCaughtUp waits until the task's cursor of the session is at the
// guest's event log head: every event of the flood was relayed (and
// dropped or taken).
func waitCaughtUp(t *testing.T, a *agentEnv, taskID domain.TaskID, sid domain.SessionID) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 10*time.Minute, "the relay caught up with the guest's events", func() (bool, string) {
		out, code := guestRun(ctx, a.c, string(sid), "/bin/sh", "-c", "wc -l < /var/lib/engrams/harness.events.jsonl")
		head, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if code != 0 || err != nil {
			return false, fmt.Sprintf("guest log: exit %d %q", code, out)
		}
		res, err := a.st.IngestTaskEvents(ctx, store.TaskIngest{TaskID: taskID, SessionID: sid}) // no events: reads the cursor
		return err == nil && res.Cursor >= head, fmt.Sprintf("cursor %d (%v), guest head %d", res.Cursor, err, head)
	})
}

// checkFloodDropped: the task kept a small part of the flood, had one
// note of the rate, and the replica counted what it dropped.
func checkFloodDropped(t *testing.T, a *agentEnv, id string, reg *metrics.Registry, flood int) {
	t.Helper()
	ctx := context.Background()
	got, err := a.st.GetTask(ctx, domain.TaskID(id))
	if err != nil {
		t.Fatal(err)
	}
	notes := 0
	err = a.c.Tasks().Events(ctx, id, 0, false, func(e apiv1.TaskEvent) error {
		var d struct{ Kind, Quota string }
		if e.Type == "error" && json.Unmarshal(e.Data, &d) == nil && d.Kind == tasks.QuotaErrorKind {
			notes++
		}
		return nil
	})
	if err != nil || notes != 1 || got.EventSeq > int64(flood/2) {
		t.Errorf("the task holds %d events of a flood of %d, %d quota notes (%v); want under half, one note", got.EventSeq, flood, notes, err)
	}
	rec := httptest.NewRecorder()
	reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	m := regexp.MustCompile(`engrams_quota_refusals_total\{quota="ingest_rate"\} (\d+)`).FindStringSubmatch(rec.Body.String())
	if m == nil {
		t.Fatalf("no ingest_rate refusals counted")
	}
	dropped, _ := strconv.Atoi(m[1])
	if dropped < flood/2 {
		t.Errorf("%d refusals counted, want at least %d", dropped, flood/2)
	}
	t.Logf("the task kept %d events (%d bytes); %d of the flood's events were dropped over the rate", got.EventSeq, got.EventBytes, dropped)
}
