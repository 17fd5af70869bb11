package broker

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/url"
)

// A scrubber replaces every form a credential can take in an upstream's
// answer by the placeholder: the secret as sent (the token, and a Basic
// login's user:token), its URL escapes, and its base64 in both alphabets
// at each of the three byte alignments (what of it sits whole inside a
// longer base64 text), so an upstream that echoes a request back hands
// the guest nothing it did not send.

// minBase64Form: base64 forms shorter than this are not looked for (a
// secret of a few bytes would otherwise match all over every answer);
// their secret is in its raw and escaped forms.
const minBase64Form = 6

// form is one way a secret is spelled, and its placeholder's spelling.
type form struct {
	secret, repl []byte
}

// scrubber replaces the forms of a set of secrets.
type scrubber struct {
	forms   []form
	longest int
}

// newScrubber returns the scrubber of secrets (each replaced by the form
// of ph in the same encoding).
func newScrubber(ph string, secrets ...string) *scrubber {
	s := &scrubber{}
	add := func(secret, repl string) {
		if secret == "" || secret == repl || s.has(secret) {
			return
		}
		s.forms = append(s.forms, form{secret: []byte(secret), repl: []byte(repl)})
		s.longest = max(s.longest, len(secret))
	}
	for _, sec := range secrets {
		add(sec, ph)
		add(url.QueryEscape(sec), url.QueryEscape(ph))
		add(url.PathEscape(sec), url.PathEscape(ph))
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			for align := range 3 {
				if f := base64Core(enc, sec, align); len(f) >= minBase64Form {
					add(f, base64Core(enc, ph, align))
				}
			}
		}
	}
	return s
}

func (s *scrubber) has(secret string) bool {
	for _, f := range s.forms {
		if string(f.secret) == secret {
			return true
		}
	}
	return false
}

// base64Core is what the base64 of v shows of v alone when v starts
// align bytes into the encoded text: the characters whose 6 bits all come
// from v.
func base64Core(enc *base64.Encoding, v string, align int) string {
	text := enc.EncodeToString(append(make([]byte, align), v...))
	from := (8*align + 5) / 6
	to := 8 * (align + len(v)) / 6
	if to <= from {
		return ""
	}
	return text[from:to]
}

// String returns v with every form replaced.
func (s *scrubber) String(v string) string {
	if len(s.forms) == 0 {
		return v
	}
	out, _ := s.replace(nil, []byte(v), true)
	return string(out)
}

// Contains reports whether v holds a form.
func (s *scrubber) Contains(v string) bool {
	for _, f := range s.forms {
		if bytes.Contains([]byte(v), f.secret) {
			return true
		}
	}
	return false
}

// replace appends to dst what of buf can be settled: buf up to where a
// form could still begin (all of it when final), every form replaced; it
// returns that and the rest, to be looked at again with what follows.
func (s *scrubber) replace(dst, buf []byte, final bool) (out, rest []byte) {
	for {
		at, f := -1, form{}
		for _, c := range s.forms {
			i := bytes.Index(buf, c.secret)
			if i >= 0 && (at < 0 || i < at || i == at && len(c.secret) > len(f.secret)) {
				at, f = i, c
			}
		}
		if at < 0 {
			break
		}
		dst = append(append(dst, buf[:at]...), f.repl...)
		buf = buf[at+len(f.secret):]
	}
	if final {
		return append(dst, buf...), nil
	}
	keep := min(len(buf), max(s.longest-1, 0))
	return append(dst, buf[:len(buf)-keep]...), buf[len(buf)-keep:]
}

// scrubWriter streams through a scrubber into w: a form split across
// writes is caught, since what could begin one is held back (at most the
// longest form, less a byte) until the next write or Close.
type scrubWriter struct {
	s    *scrubber
	w    io.Writer
	held []byte
	out  []byte
}

func (s *scrubber) writer(w io.Writer) *scrubWriter { return &scrubWriter{s: s, w: w} }

func (sw *scrubWriter) Write(p []byte) (int, error) {
	if err := sw.emit(append(sw.held, p...), false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is held.
func (sw *scrubWriter) Close() error { return sw.emit(sw.held, true) }

func (sw *scrubWriter) emit(buf []byte, final bool) error {
	var rest []byte
	sw.out, rest = sw.s.replace(sw.out[:0], buf, final)
	sw.held = append(sw.held[:0], rest...)
	if len(sw.out) == 0 {
		return nil
	}
	_, err := sw.w.Write(sw.out)
	return err
}
