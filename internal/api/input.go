package api

import (
	"fmt"
	"net/http"
	"path"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/internal/guestapi"
)

// Bounds on what a request may carry in its path and query, and on what
// an answer repeats of it: a refusal quotes at most maxEcho bytes of the
// input it refuses, and no error message is longer than maxErrorMessage.
const (
	maxEcho         = 64 // as guestapi.QuoteInput
	maxErrorMessage = 4 << 10
	maxPathValue    = 256 // ids and names
	maxQueryValue   = guestapi.MaxFilePath
	maxRawQuery     = 16 << 10
)

// quote is s as an error message repeats input: quoted (control bytes
// escaped), and cut after 64 bytes (maxEcho).
func quote(s string) string { return guestapi.QuoteInput(s) }

// bounded cuts an error message to maxErrorMessage bytes.
func bounded(msg string) string {
	if len(msg) <= maxErrorMessage {
		return msg
	}
	cut := maxErrorMessage
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "…"
}

// checkInput refuses a request whose path values (the {name}s of its
// route's pattern) or query values no route could accept: too long,
// holding control characters or not UTF-8 (ids and names never do; a
// database may not even store them). It answers 400 and reports false.
func checkInput(pattern string) func(w http.ResponseWriter, r *http.Request) bool {
	var names []string
	for rest := pattern; ; {
		i := strings.IndexByte(rest, '{')
		j := strings.IndexByte(rest, '}')
		if i < 0 || j < i {
			break
		}
		names = append(names, strings.TrimSuffix(rest[i+1:j], "..."))
		rest = rest[j+1:]
	}
	return func(w http.ResponseWriter, r *http.Request) bool {
		for _, n := range names {
			if v := r.PathValue(n); len(v) > maxPathValue || !printable(v) {
				writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, fmt.Sprintf(
					"%s %s: want at most %d bytes of printable UTF-8", n, quote(v), maxPathValue))
				return false
			}
		}
		if len(r.URL.RawQuery) > maxRawQuery {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, fmt.Sprintf("the query is over %d bytes", maxRawQuery))
			return false
		}
		for k, vs := range r.URL.Query() {
			for _, v := range vs {
				if len(k) > maxEcho || len(v) > maxQueryValue || !printable(k) || !printable(v) {
					writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, fmt.Sprintf(
						"query parameter %s = %s: want at most %d bytes of printable UTF-8", quote(k), quote(v), maxQueryValue))
					return false
				}
			}
		}
		return true
	}
}

// checked is fn behind checkInput.
func checked(pattern string, fn http.HandlerFunc) http.HandlerFunc {
	ok := checkInput(pattern)
	return func(w http.ResponseWriter, r *http.Request) {
		if ok(w, r) {
			fn(w, r)
		}
	}
}

// printable reports whether s is UTF-8 without control characters.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
			return false
		}
	}
	return true
}

// filePath reads the ?path= of a file route: absolute, at most
// guestapi.MaxFilePath bytes, no NUL; returned cleaned. A bad one is
// answered with 400.
func filePath(w http.ResponseWriter, r *http.Request) (string, bool) {
	p := r.URL.Query().Get("path")
	if err := guestapi.CheckFilePath(p); err != nil {
		writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, guestapi.FilePathError(p, err))
		return "", false
	}
	return path.Clean(p), true
}

// nulString names the first string in v (a decoded request body) that
// holds a NUL character, which no field means and the database cannot
// store; "" when there is none.
func nulString(v reflect.Value, at string) string {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return nulString(v.Elem(), at)
		}
	case reflect.String:
		if strings.IndexByte(v.String(), 0) >= 0 {
			return at
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if !t.Field(i).IsExported() {
				continue
			}
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			if name == "" {
				name = t.Field(i).Name
			}
			if t.Field(i).Anonymous {
				name = ""
			}
			if p := nulString(v.Field(i), join(at, name)); p != "" {
				return p
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return "" // bytes (base64 in JSON, or raw JSON) may hold anything
		}
		for i := range v.Len() {
			if p := nulString(v.Index(i), fmt.Sprintf("%s[%d]", at, i)); p != "" {
				return p
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			if strings.IndexByte(k, 0) >= 0 {
				return join(at, quote(k))
			}
			if p := nulString(it.Value(), join(at, quote(k))); p != "" {
				return p
			}
		}
	}
	return ""
}

func join(at, name string) string {
	switch {
	case name == "":
		return at
	case at == "":
		return name
	}
	return at + "." + name
}
