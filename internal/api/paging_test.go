package api_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// walk reads a list page by page and returns the ids (or names) in order
// and how many pages it took.
func walk(t *testing.T, get func(target string) (int, string), path, field, key string, limit int) ([]string, int) {
	t.Helper()
	var ids []string
	cursor := ""
	for pages := 1; pages < 20; pages++ {
		target := path + "?limit=" + url.QueryEscape(string(rune('0'+limit)))
		if cursor != "" {
			target += "&cursor=" + url.QueryEscape(cursor)
		}
		code, body := get(target)
		if code != 200 {
			t.Fatalf("GET %s: %d %s", target, code, body)
		}
		var page map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatal(err)
		}
		var items []map[string]any
		_ = json.Unmarshal(page[field], &items)
		if len(items) > limit {
			t.Fatalf("GET %s: %d items, limit %d", target, len(items), limit)
		}
		for _, it := range items {
			ids = append(ids, it[key].(string))
		}
		cursor = ""
		_ = json.Unmarshal(page["next_cursor"], &cursor)
		if cursor == "" {
			return ids, pages
		}
	}
	t.Fatalf("%s: no end after 20 pages", path)
	return nil, 0
}

func TestListsArePaged(t *testing.T) {
	t.Parallel()
	a := newTaskAPI(t)
	get := func(target string) (int, string) { rec := a.do("GET", target, ""); return rec.Code, rec.Body.String() }
	if ids, pages := walk(t, get, "/v1/tasks", "items", "id", 2); strings.Join(ids, " ") != "t1 t2 t3" || pages != 2 {
		t.Errorf("tasks by pages of 2: %v in %d pages, want t1 t2 t3 in 2", ids, pages)
	}
	if ids, _ := walk(t, get, "/v1/tasks", "items", "id", 3); strings.Join(ids, " ") != "t1 t2 t3" {
		t.Errorf("tasks by pages of 3: %v", ids)
	}
	ag := newAgentAPI(t, agentOpts{})
	seedProfiles(t, ag)
	for _, name := range []string{"c", "a", "b"} {
		body := `{"name":"` + name + `","spec":{"image":"py","harness":"claude-code","credentials":["ant"]}}`
		if rec := ag.do("POST", "/v1/profiles", "application/json", strings.NewReader(body)); rec.Code != 201 {
			t.Fatalf("create profile %s: %d %s", name, rec.Code, rec.Body)
		}
	}
	agGet := func(target string) (int, string) {
		rec := ag.do("GET", target, "", nil)
		return rec.Code, rec.Body.String()
	}
	if names, pages := walk(t, agGet, "/v1/profiles", "items", "name", 1); strings.Join(names, " ") != "a b c" || pages != 3 {
		t.Errorf("profiles by pages of 1: %v in %d pages", names, pages)
	}
	if names, _ := walk(t, agGet, "/v1/secrets", "items", "name", 1); strings.Join(names, " ") != "ant gh" {
		t.Errorf("secrets by pages of 1: %v", names)
	}
	for _, target := range []string{"/v1/tasks?limit=0", "/v1/tasks?limit=501", "/v1/tasks?limit=x", "/v1/tasks?cursor=!!!", "/v1/tasks?cursor=bm9wZQ", "/v1/profiles?limit=-1"} {
		if code, body := get(target); code != 400 {
			t.Errorf("GET %s: %d %s, want 400", target, code, body)
		}
	}
}
