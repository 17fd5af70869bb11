package tasks

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/engrams/engrams/internal/guestapi"
)

// FuzzGuestTaskEvent feeds guestTaskEvent any harness event a guest can
// send (one JSON line): what is stored must be an adapter event type with
// a valid JSON payload (or none), its guest seq, and never over the size
// quota, however the guest shaped its fields. Seeds: testdata/fuzz.
func FuzzGuestTaskEvent(f *testing.F) {
	f.Add([]byte(`{"seq":1,"type":"assistant_text","turn":"u","data":{"text":"hi"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var e guestapi.HarnessEvent
		if json.Unmarshal(line, &e) != nil {
			return
		}
		const limit = 1024
		got, over := guestTaskEvent(e, taskT0, limit)
		if !guestEventType(got.Type) || got.GuestSeq != e.Seq {
			t.Fatalf("stored type %q guest seq %d from %q", got.Type, got.GuestSeq, line)
		}
		if len(got.Payload) > 0 && !json.Valid(got.Payload) {
			t.Fatalf("stored payload %q is not JSON (from %q)", got.Payload, line)
		}
		// A note is small: the type of an event, a turn of at most
		// maxNoteTurn, a size; an unknown type cut to 64 runes.
		if n := got.Bytes(); n > limit && n > 4*64+2*maxNoteTurn+200 {
			t.Fatalf("stored %d bytes over the limit of %d (over %v) from %q", n, limit, over, line)
		}
		if over && (got.Bytes() > 2*maxNoteTurn+100 || !utf8.Valid(got.Payload)) {
			t.Fatalf("size note %q", got.Payload)
		}
	})
}
