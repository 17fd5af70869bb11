package automations

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzDecodeDefinition: any bytes decode or fail with ErrBadDefinition,
// and whatever decodes validates without panicking.
func FuzzDecodeDefinition(f *testing.F) {
	f.Add([]byte(review))
	f.Add([]byte(`{"name":"x","trigger":{"kind":"schedule","cron":"0 9 * * 1","time_zone":"Europe/Paris"},"blocks":[{"id":"a","kind":"loop","max":2,"body":[]}]}`))
	f.Add([]byte("name: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := DecodeDefinition(raw)
		if err != nil {
			return
		}
		_ = Validate(d, DefaultLimits())
		_, _ = ResolveInputs(d.Inputs, map[string]any{"x": "1"})
	})
}

// FuzzVerifyWebhook: whatever the headers, a delivery passes only with
// the signature of its body at its timestamp among its signatures.
func FuzzVerifyWebhook(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	f.Add("1800000000", SignWebhook([]byte("secret"), 1_800_000_000, []byte("{}")), []byte("{}"))
	f.Add(" 1799999900", "v1=00,v1=11", []byte("x"))
	f.Fuzz(func(t *testing.T, ts, sig string, body []byte) {
		if VerifyWebhook([]byte("secret"), ts, sig, body, now) != nil {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(ts), 10, 64)
		if err != nil {
			t.Fatalf("accepted an unparsable timestamp %q", ts)
		}
		want := SignWebhook([]byte("secret"), n, body)
		for _, s := range strings.Split(sig, ",") {
			if strings.TrimSpace(s) == want {
				return
			}
		}
		t.Fatalf("accepted %q %q without its signature", ts, sig)
	})
}
