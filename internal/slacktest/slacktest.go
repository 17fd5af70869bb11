package slacktest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Message is one message the fake holds, with every text it had.
type Message struct {
	Channel, TS, ThreadTS, Text string
	Edits                       []string // the texts chat.update set, in order
	Metadata                    json.RawMessage
}

// Reaction is one reactions.add.
type Reaction struct{ Channel, TS, Name string }

// Server is a fake Slack: Web API under /api/, Socket Mode at /socket.
type Server struct {
	*httptest.Server
	bot, app string
	mu       sync.Mutex
	msgs     []*Message
	reacts   []Reaction
	n        int
	socket   chan []byte
	acks     map[string]bool
	calls    map[string]int
	users    map[string]User
}

// User is a workspace member as users.info describes one.
type User struct {
	ID             string
	Email          string
	EmailConfirmed bool
	Bot            bool
}

// Start runs a fake Slack that accepts botToken on the Web API and
// appToken for apps.connections.open, until the test ends.
func Start(t testing.TB, botToken, appToken string) *Server {
	s := &Server{bot: botToken, app: appToken, socket: make(chan []byte, 16), acks: map[string]bool{}, calls: map[string]int{}, users: map[string]User{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.api)
	mux.HandleFunc("/socket", s.socketMode)
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// APIURL is the Web API base to configure.
func (s *Server) APIURL() string { return s.URL + "/api/" }

// Post adds a user's message (a mention, a reply) and returns its ts.
func (s *Server) Post(channel, thread, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addLocked(channel, thread, text, nil).TS
}

func (s *Server) addLocked(channel, thread, text string, meta json.RawMessage) *Message {
	s.n++
	m := &Message{Channel: channel, TS: fmt.Sprintf("1700000000.%06d", s.n), ThreadTS: thread, Text: text, Metadata: meta}
	s.msgs = append(s.msgs, m)
	return m
}

// Thread returns the replies in a thread (not its root), in order.
func (s *Server) Thread(channel, ts string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Message
	for _, m := range s.msgs {
		if m.Channel == channel && m.ThreadTS == ts && m.TS != ts {
			c := *m
			c.Edits = append([]string(nil), m.Edits...)
			out = append(out, c)
		}
	}
	return out
}

// AddUser makes u a member of the workspace (users.info answers it).
func (s *Server) AddUser(u User) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = u
}

// Reactions returns every reaction added.
func (s *Server) Reactions() []Reaction {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Reaction(nil), s.reacts...)
}

// Calls counts the calls of a Web API method.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// params reads a method's arguments: a JSON body, or a form, or the query.
func params(r *http.Request) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range r.URL.Query() {
		out[k] = v[0]
	}
	if r.Body == nil {
		return out, nil
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil || len(b) == 0 {
		return out, err
	}
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		return out, json.Unmarshal(b, &out)
	}
	r.Body = io.NopCloser(strings.NewReader(string(b)))
	if err := r.ParseForm(); err != nil {
		return out, err
	}
	for k, v := range r.PostForm {
		out[k] = v[0]
	}
	return out, nil
}

func str(p map[string]any, k string) string { s, _ := p[k].(string); return s }

func reply(w http.ResponseWriter, v map[string]any) {
	v["ok"] = true
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code string) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": code})
}

func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	want := s.bot
	if method == "apps.connections.open" {
		want = s.app
	}
	if tok != want || want == "" {
		fail(w, "invalid_auth")
		return
	}
	p, err := params(r)
	if err != nil {
		fail(w, "invalid_arguments")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	switch method {
	case "auth.test":
		reply(w, map[string]any{"user_id": "UBOT", "bot_id": "BBOT", "team_id": "T1"})
	case "chat.postMessage":
		meta, _ := json.Marshal(p["metadata"])
		if str(p, "channel") == "" || str(p, "text") == "" {
			fail(w, "no_text")
			return
		}
		m := s.addLocked(str(p, "channel"), str(p, "thread_ts"), str(p, "text"), meta)
		reply(w, map[string]any{"channel": m.Channel, "ts": m.TS})
	case "chat.update":
		for _, m := range s.msgs {
			if m.Channel == str(p, "channel") && m.TS == str(p, "ts") {
				m.Text = str(p, "text")
				m.Edits = append(m.Edits, m.Text)
				reply(w, map[string]any{"channel": m.Channel, "ts": m.TS})
				return
			}
		}
		fail(w, "message_not_found")
	case "reactions.add":
		for _, x := range s.reacts {
			if x.Channel == str(p, "channel") && x.TS == str(p, "timestamp") && x.Name == str(p, "name") {
				fail(w, "already_reacted")
				return
			}
		}
		s.reacts = append(s.reacts, Reaction{Channel: str(p, "channel"), TS: str(p, "timestamp"), Name: str(p, "name")})
		reply(w, map[string]any{})
	case "conversations.replies", "conversations.history":
		s.list(w, method, p)
	case "users.info":
		u, ok := s.users[str(p, "user")]
		if !ok {
			fail(w, "user_not_found")
			return
		}
		reply(w, map[string]any{"user": map[string]any{"id": u.ID, "team_id": "T1", "is_bot": u.Bot, "deleted": false,
			"is_email_confirmed": u.EmailConfirmed, "profile": map[string]any{"email": u.Email}}})
	case "apps.connections.open":
		reply(w, map[string]any{"url": "ws" + strings.TrimPrefix(s.URL, "http") + "/socket"})
	default:
		fail(w, "unknown_method")
	}
}

func (s *Server) list(w http.ResponseWriter, method string, p map[string]any) {
	var out []map[string]any
	for _, m := range s.msgs {
		in := m.Channel == str(p, "channel")
		if method == "conversations.replies" {
			in = in && (m.ThreadTS == str(p, "ts") || m.TS == str(p, "ts"))
		} else {
			in = in && m.ThreadTS == ""
		}
		if in {
			msg := map[string]any{"ts": m.TS, "text": m.Text}
			if len(m.Metadata) > 0 && string(m.Metadata) != "null" && str(p, "include_all_metadata") == "true" {
				msg["metadata"] = m.Metadata
			}
			out = append(out, msg)
		}
	}
	reply(w, map[string]any{"messages": out})
}

// PushEvent sends an Events API payload over the Socket Mode connection
// and returns its envelope id (see Acked).
func (s *Server) PushEvent(payload []byte) string {
	s.mu.Lock()
	s.n++
	id := "env-" + strconv.Itoa(s.n)
	s.mu.Unlock()
	frame, _ := json.Marshal(map[string]any{"type": "events_api", "envelope_id": id, "payload": json.RawMessage(payload),
		"accepts_response_payload": false})
	s.socket <- frame
	return id
}

// Acked reports whether the client acknowledged an envelope.
func (s *Server) Acked(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acks[id]
}

func (s *Server) socketMode(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer c.CloseNow()
	ctx := r.Context()
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","num_connections":1}`))
	go func() {
		for {
			_, b, err := c.Read(ctx)
			if err != nil {
				return
			}
			var ack struct {
				EnvelopeID string `json:"envelope_id"`
			}
			if json.Unmarshal(b, &ack) == nil && ack.EnvelopeID != "" {
				s.mu.Lock()
				s.acks[ack.EnvelopeID] = true
				s.mu.Unlock()
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case f := <-s.socket:
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := c.Write(wctx, websocket.MessageText, f)
			cancel()
			if err != nil {
				return
			}
		}
	}
}

// Event is an event_callback body for an inner event.
func Event(eventID string, inner map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "event_callback", "event_id": eventID, "team_id": "T1",
		"authorizations": []map[string]any{{"user_id": "UBOT", "is_bot": true}}, "event": inner})
	return b
}
