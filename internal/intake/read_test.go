package intake_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/intake"
)

// TestPipelineSeeds: the fuzz test's signed seeds start a run through
// each receiver and the unsigned ones do not, so FuzzPipeline cannot pass
// for want of an accepted delivery.
func TestPipelineSeeds(t *testing.T) {
	t.Parallel()
	ts := fmt.Sprint(now.Unix())
	rcv := receivers(t)
	for _, c := range []struct {
		src  connector.Source
		body string
	}{
		{connector.SourceHook, `{"ref":"v1"}`},
		{connector.SourceSlack, `{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention","user":"U1","text":"hi","ts":"1.1","channel":"C1"}}`},
		{connector.SourceGitHub, `{"action":"opened","pull_request":{"number":1,"author_association":"MEMBER"},"repository":{"full_name":"acme/app"}}`},
		{connector.SourceLinear, `{"action":"create","type":"Issue","webhookTimestamp":1800000000000,"data":{"id":"i","labels":[{"id":"l","name":"engrams"}]}}`},
	} {
		for _, sig := range []string{realSignature(c.src, ts, []byte(c.body)), realSignature(c.src, ts, []byte(c.body+" "))} {
			runs := &connectortest.Runs{Triggers: map[string]connector.Trigger{"webhook": {}, "slack_mention": {}, "github_pr": {}, "linear_issue": {}}}
			p := connectortest.Pipeline(t, runs, func() time.Time { return now }, rcv...)
			_, err := p.Deliver(t.Context(), c.src, connector.Request{Header: headers(c.src, ts, sig), Body: []byte(c.body), Slug: "deploy"})
			good := sig == realSignature(c.src, ts, []byte(c.body))
			if started := len(runs.Runs()) == 1; started != good || (good && err != nil) || (!good && !errors.Is(err, connector.ErrBadSignature)) {
				t.Errorf("%s signed %v: %d runs, %v", c.src, good, len(runs.Runs()), err)
			}
		}
	}
}

// TestReadBounded: a delivery is bounded before a byte is verified: a
// declared length over the bound is refused at once (not after reading
// it), a body that stalls is 408, headers over their bound are 431.
func TestReadBounded(t *testing.T) {
	t.Parallel()
	p, err := intake.New(intake.Config{BodyTimeout: 300 * time.Millisecond}, intake.Deps{Receivers: receivers(t),
		Deliveries: &connectortest.Deliveries{}, Runs: &connectortest.Runs{}})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/hooks/{slug}", func(w http.ResponseWriter, r *http.Request) {
		_, err := p.Read(w, r, connector.SourceHook)
		var ref *intake.Refusal
		if errors.As(err, &ref) {
			http.Error(w, ref.Msg, ref.Status)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, c := range []struct {
		name, head, body string
		status           int
		within           time.Duration
	}{
		{"a 50 MB declaration", "Content-Length: 50000000\r\n", "", 413, time.Second},
		{"a body that stalls", "Content-Length: 100\r\n", `{"ref":`, 408, 3 * time.Second},
		{"64 KiB of headers", "Content-Length: 2\r\nX-Pad: " + strings.Repeat("a", 64<<10) + "\r\n", "{}", 431, time.Second},
		{"a small one", "Content-Length: 2\r\n", "{}", 204, time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			fmt.Fprintf(conn, "POST /v1/hooks/deploy HTTP/1.1\r\nHost: x\r\n%s\r\n%s", c.head, c.body)
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if took := time.Since(start); resp.StatusCode != c.status || took > c.within {
				t.Fatalf("%d after %s, want %d within %s", resp.StatusCode, took, c.status, c.within)
			}
		})
	}
}

// failingRuns fails its first start, as a database hiccup or a replica
// going away would.
type failingRuns struct {
	connectortest.Runs
	failed bool
}

func (f *failingRuns) StartTriggered(ctx context.Context, s connector.Start, payload json.RawMessage, key string) ([]connector.Started, error) {
	if !f.failed {
		f.failed = true
		return nil, errors.New("the database went away")
	}
	return f.Runs.StartTriggered(ctx, s, payload, key)
}

// TestFailedStartIsRetried: a delivery that started nothing is not
// remembered as seen: the sender's retry starts its run.
func TestFailedStartIsRetried(t *testing.T) {
	t.Parallel()
	runs := &failingRuns{Runs: connectortest.Runs{Triggers: map[string]connector.Trigger{"webhook": {}}}}
	p, err := intake.New(intake.Config{}, intake.Deps{Receivers: receivers(t), Deliveries: &connectortest.Deliveries{}, Runs: runs,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ts := fmt.Sprint(now.Unix())
	body := []byte(`{"ref":"v1"}`)
	req := connector.Request{Header: headers(connector.SourceHook, ts, realSignature(connector.SourceHook, ts, body)), Body: body, Slug: "deploy"}
	if _, err := p.Deliver(t.Context(), connector.SourceHook, req); err == nil {
		t.Fatal("the failed start answered no error")
	}
	out, err := p.Deliver(t.Context(), connector.SourceHook, req)
	if err != nil || out.Duplicate || len(runs.Runs.Runs()) != 1 {
		t.Fatalf("the retry: %+v %v, %d runs", out, err, len(runs.Runs.Runs()))
	}
}
