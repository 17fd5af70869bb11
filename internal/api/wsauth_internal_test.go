package api

import (
	"net/http"
	"testing"
)

func TestWSBearer(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		upgrade string
		protos  []string
		want    string
		ok      bool
	}{
		{"a browser's offer", "websocket", []string{"engrams.v1, bearer.egr_abc-_1"}, "egr_abc-_1", true},
		{"in its own header line", "WebSocket", []string{"engrams.v1", "bearer.egr_x"}, "egr_x", true},
		{"no bearer offered", "websocket", []string{"engrams.v1"}, "", false},
		{"not an upgrade", "", []string{"bearer.egr_x"}, "", false},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/v1/sessions/s/exec/ws", nil)
		if tt.upgrade != "" {
			r.Header.Set("Upgrade", tt.upgrade)
		}
		for _, p := range tt.protos {
			r.Header.Add("Sec-WebSocket-Protocol", p)
		}
		if got, ok := wsBearer(r); got != tt.want || ok != tt.ok {
			t.Errorf("%s: %q %v, want %q %v", tt.name, got, ok, tt.want, tt.ok)
		}
		// A browser's upgrade, with a key or with its sign-in cookie,
		// offers engrams.v1 and is answered with it.
		if got := offers(r, "engrams.v1"); got != (tt.upgrade != "" && tt.name != "not an upgrade") {
			t.Errorf("%s: offers engrams.v1 = %v", tt.name, got)
		}
	}
}
