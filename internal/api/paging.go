package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/engrams/engrams/api/apiv1"
)

// pageReq is a list request's page: at most limit items whose key sorts
// after after ("" for the first page).
type pageReq struct {
	limit int
	after string
}

// readPage parses ?limit= and ?cursor=, answering 400 itself when they
// are bad.
func readPage(w http.ResponseWriter, r *http.Request) (pageReq, bool) {
	p := pageReq{limit: apiv1.DefaultPageLimit}
	q := r.URL.Query()
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > apiv1.MaxPageLimit {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "limit="+quote(v)+": want 1 to "+strconv.Itoa(apiv1.MaxPageLimit))
			return p, false
		}
		p.limit = n
	}
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err != nil || len(b) == 0 || len(b) > 512 {
			writeError(w, http.StatusBadRequest, apiv1.CodeBadRequest, "cursor: not a list's next_cursor")
			return p, false
		}
		p.after = string(b)
	}
	return p, true
}

// cursorOf is the opaque cursor of a key.
func cursorOf(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// pageOf pages items in memory in the order of key: those after p.after,
// at most p.limit, and the cursor of the next page ("" at the end). For
// the lists an admin makes (images, profiles, secrets, harnesses, hosts,
// tokens): small, read whole from the store. The page is never nil, so it
// is [] in JSON, not null.
func pageOf[T any](items []T, key func(T) string, p pageReq) ([]T, string) {
	items = append([]T{}, items...)
	slices.SortStableFunc(items, func(a, b T) int { return strings.Compare(key(a), key(b)) })
	i := sort.Search(len(items), func(i int) bool { return key(items[i]) > p.after })
	items = items[i:]
	if len(items) <= p.limit {
		return items, ""
	}
	return items[:p.limit], cursorOf(key(items[p.limit-1]))
}

// timeKey sorts by time (UTC microseconds, fixed width) in a key.
func timeKey(t time.Time) string { return fmt.Sprintf("%020d/", t.UnixMicro()) }
