package slackapp

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// Task event types the relay reads (tasks' and harnesses' names).
const (
	evPrompt    = "prompt"
	evAssistant = "assistant_text"
	evQuestion  = "question"
	evError     = "error"
	evIdle      = "idle"
)

// relayPage bounds the events one relay pass reads of a thread's task.
const relayPage = 200

// relayLoop posts the turns of tasks that threads carry, each pass at
// most one edit per thread, until ctx ends.
func (a *App) relayLoop(ctx context.Context) {
	t := time.NewTicker(a.cfg.RelayEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.RelayOnce(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("slack relay", "err", err)
		}
	}
}

// RelayOnce relays every thread whose task has news, holding each by
// lease while it does.
func (a *App) RelayOnce(ctx context.Context) error {
	now := a.now()
	threads, err := a.st.ClaimThreads(ctx, a.cfg.Owner, now, now.Add(a.cfg.Lease), 20)
	if err != nil || len(threads) == 0 {
		return err
	}
	c, err := a.conf(ctx)
	if err != nil {
		return err
	}
	for _, th := range threads {
		if err := a.relay(ctx, c, th); err != nil {
			a.log.Warn("relay a slack thread", "task_id", th.TaskID, "channel", th.Channel, "err", err)
		}
	}
	return nil
}

// turn is what a relay pass knows of the current turn.
type turn struct {
	text    strings.Builder
	changed bool
	ended   bool
}

func (t *turn) add(ev domain.TaskEvent) {
	var d struct {
		Text     string `json:"text"`
		Question string `json:"question"`
		Message  string `json:"message"`
		Result   string `json:"result"`
	}
	_ = json.Unmarshal(ev.Payload, &d)
	switch ev.Type {
	case evAssistant:
		if t.text.Len() > 0 && !strings.HasSuffix(t.text.String(), "\n") {
			t.text.WriteString("\n")
		}
		t.text.WriteString(connector.EscapeSlack(d.Text))
	case evQuestion:
		t.text.WriteString("\n:question: " + connector.EscapeSlack(cmp.Or(d.Question, d.Text)))
	case evError:
		t.text.WriteString("\n:warning: " + connector.EscapeSlack(d.Message))
	case evIdle:
		if t.text.Len() == 0 {
			t.text.WriteString(connector.EscapeSlack(d.Result))
		}
		t.ended = true
	default:
		return
	}
	t.changed = true
}

// relay posts what happened in a thread's task since it last did: a turn
// is one message, posted at its first text and edited as it grows; its
// end adds a reaction and a recap with a link to the task.
func (a *App) relay(ctx context.Context, c conf, th domain.ChatThread) error {
	evs, err := a.st.ListTaskEvents(ctx, th.TaskID, th.RelayedSeq, relayPage)
	if err != nil {
		return err
	}
	var t turn
	if th.TurnSeq > 0 && th.Message != "" { // the turn began before this page: its text so far
		if err := a.replay(ctx, th, &t); err != nil {
			return err
		}
		t.changed, t.ended = false, false
	}
	w := a.web(c)
	for _, ev := range evs {
		if ev.Type == evPrompt {
			if err := a.flush(ctx, w, c, &th, &t); err != nil {
				return err
			}
			th.TurnSeq, th.Message, t = ev.Seq, "", turn{}
		} else {
			t.add(ev)
		}
		th.RelayedSeq = ev.Seq
	}
	if err := a.flush(ctx, w, c, &th, &t); err != nil {
		return err
	}
	th.UpdatedAt = a.now()
	return a.st.UpdateThread(ctx, th, a.cfg.Owner)
}

// replay rebuilds the current turn's text from its prompt to the last
// event relayed.
func (a *App) replay(ctx context.Context, th domain.ChatThread, t *turn) error {
	for after := th.TurnSeq; after < th.RelayedSeq; {
		evs, err := a.st.ListTaskEvents(ctx, th.TaskID, after, relayPage)
		if err != nil || len(evs) == 0 {
			return err
		}
		for _, ev := range evs {
			if ev.Seq > th.RelayedSeq {
				return nil
			}
			t.add(ev)
			after = ev.Seq
		}
	}
	return nil
}

// flush shows the turn: its message posted (once: found by its key after
// a crash) or edited; at its end the reaction and the recap.
func (a *App) flush(ctx context.Context, w web, c conf, th *domain.ChatThread, t *turn) error {
	if !t.changed || t.text.Len() == 0 {
		return nil
	}
	text := t.text.String()
	key := fmt.Sprintf("turn/%s/%d", th.TaskID, th.TurnSeq)
	if th.Message == "" {
		ts, found, err := w.postOnce(ctx, th.Channel, th.Thread, text, key)
		if err != nil {
			return err
		}
		th.Message = ts
		if found { // posted before a crash, perhaps with less: set it
			if err := w.update(ctx, th.Channel, th.Message, text); err != nil {
				return err
			}
		}
	} else if err := w.update(ctx, th.Channel, th.Message, text); err != nil {
		return err
	}
	t.changed = false
	if !t.ended {
		return nil
	}
	if err := w.react(ctx, th.Channel, th.Thread, "white_check_mark"); err != nil {
		return err
	}
	recap := "Done. Reply in this thread to continue."
	if c.DashboardURL != "" {
		recap = fmt.Sprintf("Done: <%s/tasks/%s|open the task>. Reply in this thread to continue.", strings.TrimRight(c.DashboardURL, "/"), th.TaskID)
	}
	_, _, err := w.postOnce(ctx, th.Channel, th.Thread, recap, key+"/recap")
	return err
}
