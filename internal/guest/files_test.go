package guest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/engrams/engrams/internal/guestapi"
)

// TestFilesBadPaths: every file route answers a path no file can have
// with 400 and a message quoting a bounded prefix of it, and touches
// nothing.
func TestFilesBadPaths(t *testing.T) {
	t.Parallel()
	srv := New(Config{WorkDir: t.TempDir(), Env: os.Environ(), StateDir: t.TempDir()}, Deps{})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	dir := t.TempDir()
	long := "/" + strings.Repeat("a", 10<<10)
	deep := dir + strings.Repeat("/b", 2100) // each name is short, the path is over PATH_MAX
	paths := map[string]string{
		"missing":       "",
		"relative":      "etc/passwd",
		"10 KB":         long,
		"over PATH_MAX": deep,
		"NUL":           dir + "/x\x00y",
		"name too long": dir + "/" + strings.Repeat("n", 300), // one name over NAME_MAX
		"through a file": func() string {
			f := filepath.Join(dir, "file")
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return f + "/below"
		}(),
	}
	for name, p := range paths {
		for _, route := range []struct{ method, path string }{
			{http.MethodGet, guestapi.PathFiles}, {http.MethodPut, guestapi.PathFiles},
			{http.MethodGet, guestapi.PathFileList}, {http.MethodGet, guestapi.PathFileStat},
		} {
			t.Run(name+" "+route.method+" "+route.path, func(t *testing.T) {
				t.Parallel()
				req, err := http.NewRequest(route.method, ts.URL+route.path+"?path="+url.QueryEscape(p), strings.NewReader("data"))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := ts.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, _ := io.ReadAll(resp.Body)
				var e guestapi.ErrorBody
				if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error == "" {
					t.Fatalf("status %d, body %.200q; want 400 with an error", resp.StatusCode, body)
				}
				if len(body) > 1024 {
					t.Errorf("the answer repeats the path unbounded (%d bytes): %.200q", len(body), body)
				}
			})
		}
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
		t.Errorf("the bad paths left files behind: %v %v", ents, err)
	}
}
