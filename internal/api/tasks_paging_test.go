package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/engrams/engrams/internal/api"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/store"
)

// pagedReads fails the test (and the read) on a read of a task's events
// that is not one bounded page, and records the pages.
type pagedReads struct {
	api.TaskReads
	t     *testing.T
	mu    sync.Mutex
	pages []int // the limit of each read
}

// taskEventsPage is the largest page the tasks' SSE stream may read.
const taskEventsPage = 100

func (p *pagedReads) ListTaskEvents(ctx context.Context, taskID domain.TaskID, afterSeq int64, limit int) ([]domain.TaskEvent, error) {
	p.mu.Lock()
	p.pages = append(p.pages, limit)
	p.mu.Unlock()
	if limit < 1 || limit > taskEventsPage {
		p.t.Errorf("ListTaskEvents(after %d, limit %d): not a bounded page", afterSeq, limit)
		return nil, fmt.Errorf("unbounded read refused by the test store")
	}
	return p.TaskReads.ListTaskEvents(ctx, taskID, afterSeq, limit)
}

// TestTaskEventsCatchUpIsPaged: the catch-up of a long conversation
// streams every event in order, reading a bounded page at a time.
func TestTaskEventsCatchUpIsPaged(t *testing.T) {
	t.Parallel()
	var reads *pagedReads
	a := newTaskAPIWith(t, func(st store.Store) api.TaskReads {
		reads = &pagedReads{TaskReads: taskStore{st}, t: t}
		return reads
	})
	const more = 2*taskEventsPage + 37
	var evs []domain.TaskEvent
	for i := range more {
		evs = append(evs, domain.TaskEvent{Type: "assistant_text", Payload: json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i)), At: t0})
	}
	a.append(t, "t1", evs...)
	for _, after := range []int64{0, 150} {
		reads.mu.Lock()
		reads.pages = nil
		reads.mu.Unlock()
		rec := a.do("GET", fmt.Sprintf("/v1/tasks/t1/events?follow=false&after=%d", after), "")
		if rec.Code != 200 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		var seqs []string
		for _, line := range strings.Split(rec.Body.String(), "\n") {
			if id, ok := strings.CutPrefix(line, "id: "); ok {
				seqs = append(seqs, id)
			}
		}
		want := int(3 + more - after)
		if len(seqs) != want || seqs[0] != fmt.Sprint(after+1) || seqs[len(seqs)-1] != fmt.Sprint(3+more) {
			t.Fatalf("after %d: streamed %d events (%v...), want %d from %d", after, len(seqs), seqs[:min(3, len(seqs))], want, after+1)
		}
		reads.mu.Lock()
		if n := len(reads.pages); n < want/taskEventsPage+1 {
			t.Errorf("after %d: %d pages read (%v), want at least %d", after, n, reads.pages, want/taskEventsPage+1)
		}
		reads.mu.Unlock()
	}
}
