package server

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/metrics"
)

// TestLinkCount: engrams_host_links counts hosts, not connections: a link
// replaced by the same host's newer one (connected again, no disconnect
// in between) counts once, and a disconnect of an unknown host is ignored.
func TestLinkCount(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps string // +h connects host h, -h disconnects it
		want  string
	}{
		{"one host", "+a", "1"},
		{"replaced link", "+a +a", "1"},
		{"two hosts, one gone", "+a +b -a", "1"},
		{"all gone", "+a +a -a", "0"},
		{"unknown disconnect", "-a +b", "1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := metrics.New()
			l := &linkCount{met: reg, hosts: map[domain.HostID]bool{}}
			for _, s := range strings.Fields(tc.steps) {
				if s[0] == '+' {
					l.connected(domain.HostID(s[1:]))
				} else {
					l.disconnected(domain.HostID(s[1:]))
				}
			}
			rec := httptest.NewRecorder()
			reg.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			body, _ := io.ReadAll(rec.Body)
			if want := "engrams_host_links " + tc.want + "\n"; !strings.Contains(string(body), want) {
				t.Fatalf("want %q in\n%s", want, body)
			}
		})
	}
}
