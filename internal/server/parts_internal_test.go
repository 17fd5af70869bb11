package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
	"github.com/engrams/engrams/internal/store/sqlite"
)

type noTransports struct{}

func (noTransports) Transport(context.Context, domain.HostID) (http.RoundTripper, error) {
	return nil, context.Canceled
}

// TestHostLinkRoutes: every route hosts post to over their link is served
// by one of the parts (a route left unwired would answer the mux's 404,
// which a host takes for an older coordinator and ignores).
func TestHostLinkRoutes(t *testing.T) {
	t.Parallel()
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "db")}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	p, err := Assemble(Config{ReplicaID: "r1"}, Deps{Store: st}, noTransports{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.routeHostLink(mux)
	sid := func(path string) string { return strings.Replace(path, "{id}", "s1", 1) }
	for _, path := range []string{hostlink.PathRegister, hostlink.PathHeartbeat, sid(hostlink.PathGuestBound), sid(hostlink.PathHarnessEvents),
		sid(hostlink.PathEgress), hostlink.PathGateway + "s1/anthropic/v1/messages"} {
		if _, pattern := mux.Handler(httptest.NewRequest(http.MethodPost, path, nil)); pattern == "" {
			t.Errorf("POST %s: no host-link route", path)
		}
	}
}
