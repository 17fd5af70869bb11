package slackapp

import (
	"testing"
	"time"
)

// FuzzDecodeEnvelope: any body decodes or is refused, within bounds.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add([]byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"app_mention","user":"U1","text":"<@U> hi","ts":"1.1","channel":"C1"}}`))
	f.Add([]byte(`{"type":"url_verification","challenge":"x"}`))
	f.Add([]byte(`{"event":{"text":1}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		env, err := decodeEnvelope(body)
		if err != nil {
			return
		}
		if len(env.EventID) > 100 || len(env.Event.Text) > 40000 || len(env.Event.Channel) > 100 {
			t.Fatalf("decoded past its bounds: %+v", env)
		}
		text, over := overrides(stripMentions(env.Event.Text))
		if len(text) > len(env.Event.Text) || len(over) > 8 {
			t.Fatalf("overrides grew the text or took too many: %q %v", text, over)
		}
	})
}

// FuzzVerify: only the real signature of the exact body passes.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(`{}`), "1700000000", "v0=00")
	f.Fuzz(func(t *testing.T, body []byte, ts, sig string) {
		now := time.Unix(1_700_000_000, 0)
		if verify(signing, ts, sig, body, now) == nil && sig != Sign(signing, now.Unix(), body) && sig != Sign(signing, mustParse(ts), body) {
			t.Fatalf("a forged signature passed: %q %q", ts, sig)
		}
	})
}

func mustParse(ts string) int64 {
	var n int64
	for _, c := range ts {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int64(c-'0')
	}
	return n
}
