package hostlink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/hostlink"
)

// twoReplicas links host-1 to replica B and returns A and B.
func twoReplicas(t *testing.T, secretA string, release chan struct{}) (a, b *coordinator) {
	t.Helper()
	table := &replicaTable{hosts: map[domain.HostID][2]string{}}
	a = newCoordinator(t, "a", secretA, table)
	b = newCoordinator(t, "b", "secret", table)
	dialHost(t, b.http.URL, "tok-1", hostHandler(release))
	waitFor(t, b.connects, "host-1")
	return a, b
}

func TestRouterForwardsToPeerReplica(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	a, _ := twoReplicas(t, "secret", release)

	rt, err := a.router.Transport(t.Context(), "host-1")
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: rt}
	resp, err := client.Get("http://x/v1/machines")
	if err != nil {
		t.Fatal(err)
	}
	var ms []hostlink.MachineStatus
	_ = json.NewDecoder(resp.Body).Decode(&ms)
	resp.Body.Close()
	if len(ms) != 1 || ms[0].Epoch != 3 {
		t.Fatalf("machines via peer = %+v", ms)
	}

	// Streaming response via the peer.
	resp, err = client.Get("http://x/stream")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	close(release)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "second\n" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	resp.Body.Close()

	// Streaming request and response: each line is echoed before the next
	// is sent.
	pr, pw := io.Pipe()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://x/echo", pr)
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br = bufio.NewReader(resp.Body)
	for i := range 3 {
		fmt.Fprintf(pw, "line %d\n", i)
		if got, err := br.ReadString('\n'); err != nil || got != fmt.Sprintf("echo:line %d\n", i) {
			t.Fatalf("echo %d: %q, %v", i, got, err)
		}
	}
	_ = pw.Close()
}

func TestRouterWebSocketViaPeer(t *testing.T) {
	t.Parallel()
	a, _ := twoReplicas(t, "secret", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, a.http.URL+"/to/host-1/ws", nil)
	if err != nil {
		t.Fatalf("websocket via replica a: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "ws:hi" {
		t.Fatalf("read %q, %v", b, err)
	}
	_ = ws.Close(websocket.StatusNormalClosure, "")
}

func TestRouterWrongSecretRefused(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t, "not-the-secret", nil)
	rt, err := a.router.Transport(t.Context(), "host-1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&http.Client{Transport: rt}).Get("http://x/v1/machines")
	if err == nil || !strings.Contains(err.Error(), "cluster secret refused") {
		t.Fatalf("got %v, want cluster secret refused", err)
	}
	for _, secret := range []string{"", "secreT", "secret-but-longer"} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.http.URL+hostlink.PathPeerPrefix+"host-1/link/v1/machines", nil)
		if secret != "" {
			req.Header.Set(hostlink.HeaderClusterSecret, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("secret %q: status %d, want 401", secret, resp.StatusCode)
		}
	}
}

func TestRouterHostNotConnected(t *testing.T) {
	t.Parallel()
	a, b := twoReplicas(t, "secret", nil)
	// Nobody knows host-2.
	if _, err := a.router.Transport(t.Context(), "host-2"); !errors.Is(err, hostlink.ErrHostNotConnected) {
		t.Errorf("unknown host: got %v", err)
	}
	// The table says B, but B lost the link.
	table := &replicaTable{hosts: map[domain.HostID][2]string{"host-2": {"b", b.http.URL}}}
	r := hostlink.NewRouter(hostlink.RouterConfig{ReplicaID: "a", ClusterSecret: "secret"},
		hostlink.RouterDeps{Local: a.srv, Lookup: table.lookup})
	rt, err := r.Transport(t.Context(), "host-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&http.Client{Transport: rt}).Get("http://x/v1/machines"); !errors.Is(err, hostlink.ErrHostNotConnected) {
		t.Errorf("peer without the link: got %v", err)
	}
	_ = r.Close()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, b.http.URL+hostlink.PathPeerPrefix+"host-2/link/v1/machines", nil)
	req.Header.Set(hostlink.HeaderClusterSecret, "secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body hostlink.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || body.Code != hostlink.CodeHostNotConnected {
		t.Errorf("got %d %+v, want 503 host_not_connected", resp.StatusCode, body)
	}
	// The table names this very replica, which has no link: no loop.
	self := &replicaTable{hosts: map[domain.HostID][2]string{"host-2": {"a", a.http.URL}}}
	r2 := hostlink.NewRouter(hostlink.RouterConfig{ReplicaID: "a", ClusterSecret: "secret"},
		hostlink.RouterDeps{Local: a.srv, Lookup: self.lookup})
	if _, err := r2.Transport(t.Context(), "host-2"); !errors.Is(err, hostlink.ErrHostNotConnected) {
		t.Errorf("self: got %v", err)
	}
}
