package connectortest

import (
	"bytes"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/engrams/engrams/internal/connector"
)

// Case is one integration's receiver under the suite.
type Case struct {
	Receiver connector.Receiver
	// TriggerKind is what Body starts; Trigger an automation's trigger
	// that takes it.
	TriggerKind string
	Trigger     connector.Trigger
	// Body is a delivery that starts a run.
	Body []byte
	Slug string // a signed webhook's
	// Sign is the headers of a delivery of body sent at at, signed with
	// the integration's secret, or with another one when forged.
	Sign func(body []byte, at time.Time, forged bool) http.Header
	// Variants change a signed delivery's headers without touching what
	// the signature covers: another delivery id, whitespace, a second
	// signature of a rotation. Each is sent after the first delivery.
	Variants []func(http.Header)
	// Now is the suite's clock.
	Now time.Time
}

// Run checks c's receiver through the real delivery pipeline: a signed
// delivery starts one run, however often it is sent again under other
// ids and header variants; a forged, tampered or unsigned one starts
// nothing and is refused as a bad signature; bounds are declared.
func Run(t *testing.T, c Case) {
	now := func() time.Time { return c.Now }
	fresh := func(t *testing.T) (*Runs, func(h http.Header, body []byte) (int, error)) {
		runs := &Runs{Triggers: map[string]connector.Trigger{c.TriggerKind: c.Trigger}}
		p := Pipeline(t, runs, now, c.Receiver)
		return runs, func(h http.Header, body []byte) (int, error) {
			out, err := p.Deliver(t.Context(), c.Receiver.Source(), connector.Request{Header: h, Body: body, Slug: c.Slug})
			n := 0
			for _, s := range out.Runs {
				if s.Created {
					n++
				}
			}
			return n, err
		}
	}
	t.Run("SignedStartsOnce", func(t *testing.T) {
		runs, deliver := fresh(t)
		if n, err := deliver(c.Sign(c.Body, c.Now, false), c.Body); err != nil || n != 1 {
			t.Fatalf("a signed delivery: %d runs, %v", n, err)
		}
		for i, v := range c.Variants {
			h := c.Sign(c.Body, c.Now, false)
			v(h)
			if n, err := deliver(h, c.Body); err != nil || n != 0 {
				t.Errorf("variant %d of the same signed delivery: %d new runs, %v", i, n, err)
			}
		}
		if n := len(runs.Runs()); n != 1 {
			t.Fatalf("%d runs from one signed body sent %d times, want 1: %+v", n, len(c.Variants)+1, runs.Runs())
		}
	})
	t.Run("ForgedTamperedUnsignedRefused", func(t *testing.T) {
		runs, deliver := fresh(t)
		tampered := bytes.Replace(c.Body, []byte("{"), []byte("{ "), 1)
		for name, d := range map[string]struct {
			h    http.Header
			body []byte
		}{
			"forged":   {c.Sign(c.Body, c.Now, true), c.Body},
			"tampered": {c.Sign(c.Body, c.Now, false), tampered},
			"unsigned": {http.Header{}, c.Body},
		} {
			if _, err := deliver(d.h, d.body); !errors.Is(err, connector.ErrBadSignature) {
				t.Errorf("%s delivery: %v, want ErrBadSignature", name, err)
			}
		}
		if n := len(runs.Runs()); n != 0 {
			t.Fatalf("%d runs from refused deliveries", n)
		}
	})
	t.Run("Bounded", func(t *testing.T) {
		if m := c.Receiver.MaxBody(); m <= 0 || m > 16<<20 {
			t.Errorf("MaxBody %d: want a bound up to 16 MiB", m)
		}
		v, err := c.Receiver.Verify(t.Context(), connector.Request{Header: c.Sign(c.Body, c.Now, false), Body: c.Body, Slug: c.Slug})
		if err != nil {
			t.Fatal(err)
		}
		if v.KeepFor < 10*time.Minute || len(v.Covered) == 0 {
			t.Errorf("kept %s, known by %d bytes: want at least the replay window, and what the signature covers", v.KeepFor, len(v.Covered))
		}
	})
}
