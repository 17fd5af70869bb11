package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/domain"
)

// MaxEventBody bounds an Events API request.
const MaxEventBody = 1 << 20

// keepFor is how long a delivery is remembered: Slack retries an event
// for about an hour, each time signed anew, with the same body.
const keepFor = 24 * time.Hour

// TriggerMention is the trigger a mention starts (automations.TriggerSlackMention).
const TriggerMention = "slack_mention"

// Mention is a mention's (or a thread reply's) trigger payload.
type Mention struct {
	Channel  string `json:"channel"`
	User     string `json:"user"`
	Text     string `json:"text"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts"`
	Profile  string `json:"profile"`
}

// envelope is the outer Events API (and Socket Mode payload) object.
type envelope struct {
	Type           string `json:"type"`
	Challenge      string `json:"challenge"`
	EventID        string `json:"event_id"`
	TeamID         string `json:"team_id"`
	ExtShared      bool   `json:"is_ext_shared_channel"`
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
	UserTeam string `json:"user_team"`
	Team     string `json:"team"`
	SrcTeam  string `json:"source_team"`
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
	e := env.Event
	if len(env.EventID) > 100 || len(env.TeamID) > 40 || len(e.Channel) > 100 || len(e.User) > 40 || len(e.UserTeam)+len(e.Team)+len(e.SrcTeam) > 120 ||
		len(e.TS) > 40 || len(e.ThreadTS) > 40 || len(e.Text) > 40000 {
		return env, errors.New("an event field is over its bound")
	}
	return env, nil
}

// Source implements connector.Receiver.
func (a *App) Source() connector.Source { return connector.SourceSlack }

// MaxBody implements connector.Receiver.
func (a *App) MaxBody() int64 { return MaxEventBody }

// Verify implements connector.Receiver: X-Slack-Signature over
// "v0:TIMESTAMP:BODY", the timestamp within Window of now. A delivery is
// known by its body (it carries the event's id): Slack signs each retry
// anew, with a new timestamp.
func (a *App) Verify(ctx context.Context, req connector.Request) (connector.Verified, error) {
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Verified{}, err
	}
	if err := verify(c.signing, req.Header.Get(HeaderTimestamp), req.Header.Get(HeaderSignature), req.Body, a.now()); err != nil {
		a.log.Info("slack event refused", "err", err)
		return connector.Verified{}, err
	}
	return Vouched(req.Body), nil
}

// Vouched is what a delivery over Socket Mode is: the socket, opened with
// the app token, stands for the signature. Either way an event is known
// by its workspace and event id, which the signed body carries: Slack
// signs each retry anew, and the same event may come over either.
func Vouched(payload []byte) connector.Verified {
	var id struct {
		TeamID  string `json:"team_id"`
		EventID string `json:"event_id"`
	}
	if json.Unmarshal(payload, &id) == nil && id.EventID != "" {
		return connector.Verified{Covered: []byte("event\x00" + id.TeamID + "\x00" + id.EventID), KeepFor: keepFor}
	}
	return connector.Verified{Covered: payload, KeepFor: keepFor}
}

// Decode implements connector.Receiver: url_verification is answered; a
// mention starts the runs of slack_mention automations of its channel on
// a profile the channel may use; a reply in a thread that carries a task
// goes to the task when its sender started the thread (or may continue
// any); what may not happen is refused with a reply saying why.
func (a *App) Decode(ctx context.Context, _ connector.Verified, req connector.Request) (connector.Meaning, error) {
	env, err := decodeEnvelope(req.Body)
	if err != nil {
		return connector.Meaning{}, fmt.Errorf("%w: %v", domain.ErrInvalid, err)
	}
	if env.Type == "url_verification" {
		return connector.Meaning{Answer: map[string]string{"challenge": connector.Clip(env.Challenge, 200)}}, nil
	}
	ev := env.Event
	switch {
	case env.Type != "event_callback" || env.EventID == "":
		return connector.Meaning{Ignored: "not an event callback"}, nil
	case ev.BotID != "" || ev.User == "" || ev.Subtype != "" || ev.Channel == "" || ev.TS == "":
		return connector.Meaning{Ignored: "a bot's post, an edit or a join"}, nil
	case ev.Type != "app_mention" && ev.Type != "message":
		return connector.Meaning{Ignored: "event " + connector.Clip(ev.Type, 40)}, nil
	}
	if len(env.Authorizations) > 0 && ev.Type == "message" && strings.Contains(ev.Text, "<@"+env.Authorizations[0].UserID+">") {
		return connector.Meaning{Ignored: "the app_mention of the same message acts on it"}, nil
	}
	c, err := a.conf(ctx)
	if err != nil {
		return connector.Meaning{}, err
	}
	if ev.ThreadTS != "" {
		th, err := a.st.GetThread(ctx, domain.IntegrationSlack, ev.Channel, ev.ThreadTS)
		if err == nil {
			return a.reply(c, env, th), nil
		}
		if !errors.Is(err, domain.ErrNotFound) {
			return connector.Meaning{}, err
		}
	}
	if ev.Type != "app_mention" {
		return connector.Meaning{Ignored: "a message in a thread that carries no task"}, nil
	}
	if code := connector.LinkSaid(stripMentions(ev.Text)); code != "" {
		return a.link(c, env, code), nil
	}
	actor, refused := domain.UserID(""), external(c, env)
	if refused == "" {
		if actor, refused, err = a.member(ctx, c, cmpOr(ev.UserTeam, env.TeamID), ev.User); err != nil {
			return connector.Meaning{}, err
		}
	}
	return a.mention(c, env, actor, refused), nil
}

// external says why ev's sender may not act here ("" if they may): a user
// of another workspace (Slack Connect) unless external users are allowed.
// The sender's workspace is the event's user_team, else its team or
// source_team; in a channel shared with other workspaces a sender whose
// workspace the event does not say is refused too.
func external(c conf, env envelope) string {
	if c.AllowExternal {
		return ""
	}
	ev := env.Event
	team := cmpOr(cmpOr(ev.UserTeam, ev.Team), ev.SrcTeam)
	if (team != "" && env.TeamID != "" && team != env.TeamID) || (team == "" && env.ExtShared) {
		return "users of other workspaces may not start or steer tasks here (engrams integration add slack --allow-external)"
	}
	return ""
}

// mention is what a mention by actor (the engrams member its sender is)
// asks: a run of each slack_mention automation of its channel, on the
// profile it names ([profile=NAME], if its channel may use it) or the
// channel's default; refused (a sender of another workspace, or no
// member) starts none and says why.
func (a *App) mention(c conf, env envelope, actor domain.UserID, refused string) connector.Meaning {
	ev := env.Event
	text, over := overrides(stripMentions(ev.Text))
	thread := cmpOr(ev.ThreadTS, ev.TS)
	allowed := c.profiles(ev.Channel)
	m := Mention{Channel: ev.Channel, User: ev.User, Text: text, TS: ev.TS, ThreadTS: thread}
	switch p := over["profile"]; {
	case refused != "":
	case p != "" && !slices.Contains(allowed, p):
		refused = fmt.Sprintf("this channel may not use profile %s (it may use: %s)", p, listOr(allowed))
	case p != "":
		m.Profile = p
	case len(allowed) == 0:
		refused = "no profile is granted to this channel (engrams integration add slack --channel " + ev.Channel + "=PROFILE)"
	default:
		m.Profile = allowed[0]
	}
	admit := func(t connector.Trigger) connector.Admission {
		return connector.Admission{Match: len(t.Channels) == 0 || slices.Contains(t.Channels, ev.Channel), Refused: refused}
	}
	after := func(ctx context.Context, started []connector.Started) error {
		w := a.web(c)
		switch {
		case refused != "":
			_, err := w.post(ctx, ev.Channel, thread, "Not started: "+connector.EscapeSlack(refused)+".", "refused/"+ev.TS)
			return err
		case len(started) == 0:
			_, err := w.post(ctx, ev.Channel, thread, "No enabled automation takes mentions in this channel (`engrams automation enable slack-threads`).",
				"no-automation/"+ev.TS)
			return err
		}
		return w.react(ctx, ev.Channel, ev.TS, "eyes")
	}
	return connector.Meaning{Starts: []connector.Start{{Trigger: TriggerMention, Payload: m, Actor: actor, Admit: admit}}, After: after}
}

// reply is what a reply in a task's thread asks: the text sent to the
// task, when its sender started the thread or is one the integration lets
// continue any; otherwise a refused run of the thread's automation and a
// reply saying why.
func (a *App) reply(c conf, env envelope, th domain.ChatThread) connector.Meaning {
	ev := env.Event
	text, _ := overrides(stripMentions(ev.Text))
	refused := external(c, env)
	if refused == "" && ev.User != th.StartedBy && !slices.Contains(c.ThreadUsers, ev.User) {
		refused = "only the person who started this thread can steer its task"
	}
	w := a.web(c)
	if refused != "" {
		payload := Mention{Channel: ev.Channel, User: ev.User, Text: text, TS: ev.TS, ThreadTS: th.Thread}
		return connector.Meaning{Refusals: []connector.Refusal{{Run: th.RunID, Reason: refused, Payload: payload}},
			After: func(ctx context.Context, _ []connector.Started) error {
				_, err := w.post(ctx, ev.Channel, th.Thread, "Not passed on to the task: "+connector.EscapeSlack(refused)+".", "refused/"+ev.TS)
				return err
			}}
	}
	return connector.Meaning{After: func(ctx context.Context, _ []connector.Started) error {
		if _, err := a.tasks.SendTask(ctx, th.TaskID, text); err != nil {
			_, _ = w.post(ctx, ev.Channel, th.Thread, "Could not pass that on to the task: "+connector.EscapeSlack(connector.Clip(err.Error(), 300)),
				"reply-failed/"+ev.TS)
			return fmt.Errorf("send a thread reply to task %s: %w", th.TaskID, err)
		}
		return w.react(ctx, ev.Channel, ev.TS, "eyes")
	}}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func listOr(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
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
