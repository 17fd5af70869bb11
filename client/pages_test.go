package client_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/engrams/engrams/client"
)

// TestListFollowsCursors: List reads every page, in order, asking for the
// largest page.
func TestListFollowsCursors(t *testing.T) {
	t.Parallel()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = append(asked, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("cursor") {
		case "":
			fmt.Fprint(w, `{"items":[{"name":"a"},{"name":"b"}],"next_cursor":"Yg"}`)
		case "Yg":
			fmt.Fprint(w, `{"items":[{"name":"c"}]}`)
		default:
			http.Error(w, `{"error":"bad cursor","code":"bad_request"}`, 400)
		}
	}))
	t.Cleanup(srv.Close)
	ps, err := client.New(srv.URL, "tok").Profiles().List(t.Context())
	if err != nil || len(ps) != 3 || ps[0].Name != "a" || ps[2].Name != "c" {
		t.Fatalf("list = %+v, %v", ps, err)
	}
	if len(asked) != 2 || asked[0] != "limit=500" || asked[1] != "cursor=Yg&limit=500" {
		t.Errorf("queries %q", asked)
	}
}
