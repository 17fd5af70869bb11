package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/automations"
	"github.com/engrams/engrams/internal/autorun"
	"github.com/engrams/engrams/internal/domain"
)

// MaxEventBody bounds an Events API request.
const MaxEventBody = 1 << 20

// deliveryMemory is how long a delivery id is remembered (Slack retries
// for about an hour).
const deliveryMemory = 24 * time.Hour

// envelope is the outer Events API (and Socket Mode payload) object.
type envelope struct {
	Type           string `json:"type"`
	Challenge      string `json:"challenge"`
	EventID        string `json:"event_id"`
	Event          event  `json:"event"`
	Authorizations []struct {
		UserID string `json:"user_id"`
	} `json:"authorizations"`
}

// event is the inner event of a callback: a mention or a message.
type event struct {
	Type     string `json:"type"`
	Subtype  string `json:"subtype"`
	User     string `json:"user"`
	BotID    string `json:"bot_id"`
	Text     string `json:"text"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts"`
	Channel  string `json:"channel"`
}

// decodeEnvelope reads an Events API body, bounded.
func decodeEnvelope(body []byte) (envelope, error) {
	var env envelope
	if len(body) > MaxEventBody {
		return env, fmt.Errorf("an event of %d bytes, at most %d", len(body), MaxEventBody)
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return env, fmt.Errorf("not an Events API body: %w", err)
	}
	if len(env.EventID) > 100 || len(env.Event.Channel) > 100 || len(env.Event.TS) > 40 || len(env.Event.ThreadTS) > 40 || len(env.Event.Text) > 40000 {
		return env, errors.New("an event field is over its bound")
	}
	return env, nil
}

// HandleEvents answers one Events API request: verified, decoded, acted
// on; it returns the status and body to answer Slack with.
func (a *App) HandleEvents(ctx context.Context, h http.Header, body []byte) (int, any) {
	c, err := a.conf(ctx)
	if errors.Is(err, domain.ErrNotFound) {
		return http.StatusNotFound, map[string]string{"error": "slack is not configured"}
	}
	if err != nil {
		return http.StatusInternalServerError, map[string]string{"error": "slack settings cannot be read"}
	}
	if err := Verify(c.signing, h.Get(HeaderTimestamp), h.Get(HeaderSignature), body, a.now()); err != nil {
		a.log.Info("slack event refused", "err", err)
		return http.StatusUnauthorized, map[string]string{"error": "signature refused"}
	}
	env, err := decodeEnvelope(body)
	if err != nil {
		return http.StatusBadRequest, map[string]string{"error": err.Error()}
	}
	if env.Type == "url_verification" {
		return http.StatusOK, map[string]string{"challenge": env.Challenge}
	}
	if err := a.dispatch(ctx, c, env); err != nil {
		a.log.Warn("slack event", "event_id", env.EventID, "err", err)
	}
	return http.StatusOK, map[string]bool{"ok": true}
}

// dispatch acts on a verified callback once per event id: a mention
// starts runs, a reply in a thread carrying a task goes to the task.
func (a *App) dispatch(ctx context.Context, c conf, env envelope) error {
	if env.Type != "event_callback" || env.EventID == "" {
		return nil
	}
	ev := env.Event
	if ev.BotID != "" || ev.User == "" || ev.Subtype != "" || ev.Channel == "" || ev.TS == "" {
		return nil // the bot's own posts, edits, joins: nothing to do
	}
	bot := ""
	if len(env.Authorizations) > 0 {
		bot = env.Authorizations[0].UserID
	}
	if ev.Type == "message" && bot != "" && strings.Contains(ev.Text, "<@"+bot+">") {
		return nil // the app_mention of the same message acts on it
	}
	if ev.Type != "app_mention" && ev.Type != "message" {
		return nil
	}
	first, err := a.st.RecordDelivery(ctx, "slack", env.EventID, a.now(), a.now().Add(-deliveryMemory))
	if err != nil || !first {
		return err
	}
	if ev.ThreadTS != "" {
		th, err := a.st.GetThread(ctx, domain.IntegrationSlack, ev.Channel, ev.ThreadTS)
		if err == nil {
			return a.reply(ctx, c, th, ev)
		}
		if !errors.Is(err, domain.ErrNotFound) {
			return err
		}
	}
	if ev.Type != "app_mention" {
		return nil // a thread that carries no task
	}
	return a.mention(ctx, c, env, ev)
}

// reply sends a thread reply to its task.
func (a *App) reply(ctx context.Context, c conf, th domain.ChatThread, ev event) error {
	text, _ := overrides(stripMentions(ev.Text))
	w := a.web(c)
	if _, err := a.tasks.SendTask(ctx, th.TaskID, text); err != nil {
		_, _ = w.post(ctx, ev.Channel, th.Thread, "Could not pass that on to the task: "+clip(err.Error(), 300), "reply-failed/"+ev.TS)
		return fmt.Errorf("send a thread reply to task %s: %w", th.TaskID, err)
	}
	return w.react(ctx, ev.Channel, ev.TS, "eyes")
}

// mention starts a run of each enabled automation triggered by mentions
// in this channel, in a new thread under the mention.
func (a *App) mention(ctx context.Context, c conf, env envelope, ev event) error {
	text, over := overrides(stripMentions(ev.Text))
	profile := over["profile"]
	if profile == "" {
		profile = c.Channels[ev.Channel]
	}
	if profile == "" {
		profile = c.DefaultProfile
	}
	thread := ev.ThreadTS
	if thread == "" {
		thread = ev.TS
	}
	payload, _ := json.Marshal(map[string]string{"channel": ev.Channel, "user": ev.User, "text": text, "ts": ev.TS, "thread_ts": thread,
		"profile": profile})
	w := a.web(c)
	runs := a.starter()
	if runs == nil {
		return errors.New("automation runs are not running on this server")
	}
	started, err := runs.StartTriggered(ctx, automations.TriggerSlackMention, func(t automations.Trigger) bool {
		return len(t.Channels) == 0 || slices.Contains(t.Channels, ev.Channel)
	}, autorun.RunRequest{Kind: automations.TriggerSlackMention, Trigger: payload, DedupKey: "slack:" + env.EventID})
	if err != nil {
		_, _ = w.post(ctx, ev.Channel, thread, "Could not start: "+clip(err.Error(), 300), "mention-failed/"+ev.TS)
		return err
	}
	if len(started) == 0 {
		_, err := w.post(ctx, ev.Channel, thread, "No enabled automation takes mentions in this channel (`engrams automation enable slack-threads`).",
			"no-automation/"+ev.TS)
		return err
	}
	return w.react(ctx, ev.Channel, ev.TS, "eyes")
}

var (
	mentionRE  = regexp.MustCompile(`<@[A-Z0-9]+>`)
	overrideRE = regexp.MustCompile(`^\[([a-z_]+)=([A-Za-z0-9._-]+)\]\s*`)
)

func stripMentions(s string) string { return strings.TrimSpace(mentionRE.ReplaceAllString(s, "")) }

// overrides takes leading [key=value] settings off a message, e.g.
// "[profile=reviewer] look at this".
func overrides(s string) (string, map[string]string) {
	out := map[string]string{}
	for range 8 {
		m := overrideRE.FindStringSubmatch(s)
		if m == nil {
			break
		}
		out[m[1]] = m[2]
		s = s[len(m[0]):]
	}
	return strings.TrimSpace(s), out
}
