package broker_test

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/broker"
)

const (
	testToken = "ghp_REAL/token+7f3a9c=x"
	testPH    = "engrams-ph-abc"
)

// leaks lists the forms of secret found in b, computed apart from the
// scrubber: raw, URL-escaped, and base64 in both alphabets of the secret
// placed at each byte alignment inside a longer text, with its edge
// characters (which depend on the neighbouring bytes) left off.
func leaks(b []byte, secrets ...string) []string {
	var found []string
	for _, s := range secrets {
		forms := map[string]string{"raw": s, "query-escaped": url.QueryEscape(s), "path-escaped": url.PathEscape(s)}
		for name, enc := range map[string]*base64.Encoding{"std": base64.StdEncoding, "url": base64.URLEncoding} {
			for _, pre := range []string{"", "x", "xy"} {
				text := enc.EncodeToString([]byte(pre + s + "zzz"))
				start := (len(pre)*8 + 5) / 6
				end := (len(pre) + len(s)) * 8 / 6
				forms[name+" base64 after "+pre] = text[start:end]
			}
		}
		for name, f := range forms {
			if bytes.Contains(b, []byte(f)) {
				found = append(found, name+" of "+s)
			}
		}
	}
	return found
}

func TestScrubberReplacesEveryForm(t *testing.T) {
	t.Parallel()
	basic := "bot:" + testToken
	sc := broker.NewScrubber(testPH, basic, testToken)
	var texts []string
	for _, s := range []string{testToken, basic} {
		texts = append(texts, s, url.QueryEscape(s), url.PathEscape(s))
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding} {
			for _, pre := range []string{"", "a", "ab", "abc"} {
				texts = append(texts, enc.EncodeToString([]byte(pre+s)), enc.EncodeToString([]byte(pre+s+"tail")))
			}
		}
	}
	texts = append(texts, "Authorization: Basic "+base64.StdEncoding.EncodeToString([]byte(basic)))
	for _, text := range texts {
		in := "before " + text + " after"
		out := sc.String(in)
		if l := leaks([]byte(out), testToken); len(l) > 0 {
			t.Errorf("%q scrubbed to %q still holds %v", in, out, l)
		}
		if strings.Contains(text, testToken) && !strings.Contains(out, testPH) {
			t.Errorf("%q scrubbed to %q: want the placeholder in its place", in, out)
		}
	}
	if got := sc.String("nothing to see"); got != "nothing to see" {
		t.Errorf("an innocent text became %q", got)
	}
}

// TestScrubWriterCatchesSplitForms: a form split across writes, at every
// split point, is caught, and what holds no form passes unchanged.
func TestScrubWriterCatchesSplitForms(t *testing.T) {
	t.Parallel()
	sc := broker.NewScrubber(testPH, "bot:"+testToken, testToken)
	b64 := base64.StdEncoding.EncodeToString([]byte("xbot:" + testToken))
	in := []byte("head " + testToken + " mid " + b64 + " " + url.QueryEscape(testToken) + " tail")
	for split := range len(in) {
		var out bytes.Buffer
		w := sc.Writer(&out)
		for _, part := range [][]byte{in[:split], in[split:]} {
			if _, err := w.Write(part); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if l := leaks(out.Bytes(), testToken); len(l) > 0 || !bytes.HasPrefix(out.Bytes(), []byte("head "+testPH)) ||
			!bytes.HasSuffix(out.Bytes(), []byte(" tail")) {
			t.Fatalf("split at %d: %q (leaks %v)", split, out.Bytes(), l)
		}
	}
}

// FuzzScrubWriter: however a text is cut into writes, the stream's output
// is the whole text scrubbed at once, and holds no raw secret.
func FuzzScrubWriter(f *testing.F) {
	f.Add([]byte("a "+testToken+" b"), uint8(3), uint8(9))
	f.Add([]byte(base64.StdEncoding.EncodeToString([]byte("bot:"+testToken))), uint8(1), uint8(20))
	sc := broker.NewScrubber(testPH, "bot:"+testToken, testToken)
	f.Fuzz(func(t *testing.T, in []byte, a, b uint8) {
		if len(in) > 1<<16 {
			return
		}
		var out bytes.Buffer
		w := sc.Writer(&out)
		cuts := []int{min(int(a), len(in)), min(int(a)+int(b), len(in))}
		prev := 0
		for _, c := range cuts {
			_, _ = w.Write(in[prev:c])
			prev = c
		}
		_, _ = w.Write(in[prev:])
		_ = w.Close()
		if out.String() != sc.String(string(in)) {
			t.Fatalf("streamed %q, whole %q", out.String(), sc.String(string(in)))
		}
		if bytes.Contains(out.Bytes(), []byte(testToken)) {
			t.Fatalf("%q holds the token", out.Bytes())
		}
	})
}
