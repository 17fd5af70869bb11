package automations

import (
	"testing"
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
