package tasks

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/guestapi"
	"github.com/engrams/engrams/internal/store"
)

// taskEventPage is how many events one read of a task's conversation
// takes: no path holds more of it at once (100 events of at most
// Quotas.MaxEventBytes each), however long the conversation grows.
const taskEventPage = 100

// eachEvent calls fn with the task's events that q selects, in q's order,
// reading a page (q.Limit, else taskEventPage) at a time, until fn returns
// false or none are left.
func (c *Tasks) eachEvent(ctx context.Context, taskID domain.TaskID, q store.TaskEventQuery, fn func(domain.TaskEvent) bool) error {
	if q.Limit <= 0 || q.Limit > taskEventPage {
		q.Limit = taskEventPage
	}
	for {
		page, err := c.st.QueryTaskEvents(ctx, taskID, q)
		if err != nil {
			return fmt.Errorf("read events of task %s: %w", taskID, err)
		}
		for _, e := range page {
			if !fn(e) {
				return nil
			}
		}
		if len(page) < q.Limit {
			return nil
		}
		if last := page[len(page)-1].Seq; q.Newest {
			q.BeforeSeq = last
		} else {
			q.AfterSeq = last
		}
	}
}

// taskRepos lists the repositories a task cloned into its current
// session: the repo_cloned events after its last session event.
func (c *Tasks) taskRepos(ctx context.Context, taskID domain.TaskID) ([]clonedRepo, error) {
	var from int64
	last := store.TaskEventQuery{Types: []string{TaskEventSession}, Newest: true, Limit: 1}
	if err := c.eachEvent(ctx, taskID, last, func(e domain.TaskEvent) bool { from = e.Seq; return false }); err != nil {
		return nil, err
	}
	var out []clonedRepo
	err := c.eachEvent(ctx, taskID, store.TaskEventQuery{Types: []string{TaskEventRepoCloned}, AfterSeq: from}, func(e domain.TaskEvent) bool {
		var r clonedRepo
		if err := json.Unmarshal(e.Payload, &r); err == nil {
			out = append(out, r)
		}
		return true
	})
	return out, err
}

// sessionEvents finds sessionID's session event in a task's conversation:
// its seq (0: none), the seq of the next session event (0: none), and
// whether a session event came before it.
func (c *Tasks) sessionEvents(ctx context.Context, taskID domain.TaskID, sessionID domain.SessionID) (at, next int64, earlier bool, err error) {
	err = c.eachEvent(ctx, taskID, store.TaskEventQuery{Types: []string{TaskEventSession}}, func(e domain.TaskEvent) bool {
		if at > 0 {
			next = e.Seq
			return false
		}
		var d struct {
			SessionID domain.SessionID `json:"session_id"`
		}
		if json.Unmarshal(e.Payload, &d) != nil {
			return true
		}
		if d.SessionID == sessionID {
			at = e.Seq
		} else {
			earlier = true
		}
		return true
	})
	return at, next, earlier, err
}

// lastPrompt is the newest prompt between two seqs (before 0: no bound).
func (c *Tasks) lastPrompt(ctx context.Context, taskID domain.TaskID, after, before int64) (turn, text string, err error) {
	q := store.TaskEventQuery{Types: []string{TaskEventPrompt}, AfterSeq: after, BeforeSeq: before, Newest: true}
	err = c.eachEvent(ctx, taskID, q, func(e domain.TaskEvent) bool {
		var d struct{ Turn, Text string }
		if json.Unmarshal(e.Payload, &d) != nil {
			return true
		}
		turn, text = d.Turn, d.Text
		return false
	})
	return turn, text, err
}

// recentTranscript is the transcript of the conversation before seq
// before, read newest first and only as far back as the transcript keeps
// (maxTranscriptBytes): the same text as transcript of all of it.
func (c *Tasks) recentTranscript(ctx context.Context, taskID domain.TaskID, before int64) (string, error) {
	var kept []domain.TaskEvent
	size := 0 // of the kept lines, each with its separator
	q := store.TaskEventQuery{Types: []string{TaskEventPrompt, guestapi.EventAssistantText}, BeforeSeq: before, Newest: true}
	err := c.eachEvent(ctx, taskID, q, func(e domain.TaskEvent) bool {
		line, ok := transcriptLine(e)
		if !ok {
			return true
		}
		kept = append(kept, e)
		size += len(line) + len("\n\n")
		return size-len("\n\n") <= maxTranscriptBytes // past it, earlier turns are left out anyway
	})
	slices.Reverse(kept)
	return transcript(kept), err
}
