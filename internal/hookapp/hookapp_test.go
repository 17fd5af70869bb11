package hookapp

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
	"github.com/engrams/engrams/internal/connector/connectortest"
	"github.com/engrams/engrams/internal/domain"
)

const secret = "whsec_test-secret"

// fakeStore has one hook, "deploy", whose sealed secret is the secret
// itself (plainSealer opens it as it is).
type fakeStore struct{}

func (fakeStore) GetAutomationBySlug(_ context.Context, slug string) (domain.Automation, error) {
	if slug != "deploy" {
		return domain.Automation{}, domain.ErrNotFound
	}
	return domain.Automation{ID: "a-1", Org: domain.FirstOrg, Name: "deploy", Enabled: true, TriggerKind: TriggerKind, HookSlug: slug, HookSecret: []byte(secret)}, nil
}

type plainSealer struct{}

func (plainSealer) Open(c, _ []byte) ([]byte, error) { return append([]byte(nil), c...), nil }

func newReceiver(t *testing.T, now time.Time) *Receiver {
	t.Helper()
	h, err := New(Deps{Store: fakeStore{}, Sealer: plainSealer{}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func signed(body []byte, at time.Time, forged bool) http.Header {
	key := secret
	if forged {
		key = "whsec_another"
	}
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderSignature, Sign([]byte(key), at.Unix(), body))
	h.Set(HeaderDelivery, "d-1")
	return h
}

// TestConformance: signed webhooks pass the integration seam's suite.
func TestConformance(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	connectortest.Run(t, connectortest.Case{Receiver: newReceiver(t, now), TriggerKind: TriggerKind, Body: []byte(`{"ref":"v1"}`), Slug: "deploy",
		Sign: signed, Now: now, Variants: []func(http.Header){
			func(h http.Header) { h.Set(HeaderDelivery, "d-2") },
			func(h http.Header) { h.Del(HeaderDelivery) },
			func(h http.Header) { h.Set(HeaderSignature, "v1=00, "+h.Get(HeaderSignature)) },
			func(h http.Header) { h.Set(HeaderTimestamp, " 0"+h.Get(HeaderTimestamp)+" ") },
		}})
}

func TestVerify(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	h := newReceiver(t, now)
	body := []byte(`{"x":1}`)
	ts := now.Add(-time.Minute)
	good := Sign([]byte(secret), ts.Unix(), body)
	itoa := func(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }
	for _, tt := range []struct {
		name, slug, ts, sig string
		body                []byte
		ok                  bool
	}{
		{"signed", "deploy", itoa(ts), good, body, true},
		{"one of two signatures (rotation)", "deploy", itoa(ts), "v1=00," + good, body, true},
		{"another body", "deploy", itoa(ts), good, []byte(`{"x":2}`), false},
		{"another secret", "deploy", itoa(ts), Sign([]byte("other"), ts.Unix(), body), body, false},
		{"stale", "deploy", itoa(now.Add(-6 * time.Minute)), Sign([]byte(secret), now.Add(-6*time.Minute).Unix(), body), body, false},
		{"from the future", "deploy", itoa(now.Add(6 * time.Minute)), Sign([]byte(secret), now.Add(6*time.Minute).Unix(), body), body, false},
		{"the timestamp not signed with", "deploy", strconv.FormatInt(ts.Unix()+1, 10), good, body, false},
		{"no timestamp", "deploy", "", good, body, false},
		{"no signature", "deploy", itoa(ts), "", body, false},
		{"a signature over 1 KiB", "deploy", itoa(ts), strings.Repeat("v1=00,", 200) + good, body, false},
		{"no such hook", "nope", itoa(ts), good, body, false},
	} {
		hd := http.Header{}
		hd.Set(HeaderTimestamp, tt.ts)
		hd.Set(HeaderSignature, tt.sig)
		_, err := h.Verify(t.Context(), connector.Request{Header: hd, Body: tt.body, Slug: tt.slug})
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, connector.ErrBadSignature)) {
			t.Errorf("%s: %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// FuzzVerify: whatever the headers, a delivery passes only with the
// signature of its body at its timestamp among its signatures.
func FuzzVerify(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add("1800000000", Sign([]byte(secret), 1_800_000_000, []byte("{}")), []byte("{}"))
	f.Add(" 1799999900", "v1=00,v1=11", []byte("x"))
	h, _ := New(Deps{Store: fakeStore{}, Sealer: plainSealer{}, Now: func() time.Time { return now }})
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		hd := http.Header{}
		hd.Set(HeaderTimestamp, ts)
		hd.Set(HeaderSignature, sig)
		if _, err := h.Verify(context.Background(), connector.Request{Header: hd, Body: body, Slug: "deploy"}); err != nil {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
		if err != nil {
			t.Fatalf("accepted an unparsable timestamp %q", ts)
		}
		want := Sign([]byte(secret), n, body)
		for _, s := range strings.Split(sig, ",") {
			if strings.TrimSpace(s) == want {
				return
			}
		}
		t.Fatalf("accepted %q %q without its signature", ts, sig)
	})
}
