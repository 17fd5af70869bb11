package client_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
)

// cutServer answers exec (NDJSON and WebSocket) with output and no exit,
// its epoch header set to epoch ("" none), and the session with ops.
func cutServer(t *testing.T, epoch string, ops []apiv1.Op) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sessions/{id}/exec", func(w http.ResponseWriter, _ *http.Request) {
		if epoch != "" {
			w.Header().Set(apiv1.HeaderSessionEpoch, epoch)
		}
		fmt.Fprintln(w, `{"type":"stdout","data":"aGk="}`)
	})
	mux.HandleFunc("GET /v1/sessions/{id}/exec/ws", func(w http.ResponseWriter, r *http.Request) {
		if epoch != "" {
			w.Header().Set(apiv1.HeaderSessionEpoch, epoch)
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		if _, _, err := c.Read(r.Context()); err != nil {
			return
		}
		_ = c.Write(r.Context(), websocket.MessageBinary, []byte{apiv1.ChanStdout, 'h', 'i'})
	})
	mux.HandleFunc("GET /v1/sessions/{id}", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(apiv1.Session{ID: r.PathValue("id"), State: "suspending", Ops: ops})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestExecCutShort: an exec stream that ends without its exit is
// explained by the first op after the command's epoch that takes the
// machine away; without one (or without the epoch) it stays ErrNoExit.
func TestExecCutShort(t *testing.T) {
	t.Parallel()
	ops := func(kinds ...string) []apiv1.Op {
		var out []apiv1.Op
		for i, k := range kinds {
			out = append(out, apiv1.Op{ID: fmt.Sprintf("op%d", i+1), Kind: k, State: "running", Epoch: int64(i + 1)})
		}
		return out
	}
	tests := []struct {
		name     string
		epoch    string
		ops      []apiv1.Op
		wantKind string // "" plain ErrNoExit
		wantOp   string
	}{
		{"suspended under the command", "2", ops("create", "resume", "suspend"), "suspend", "op3"},
		{"suspended, by an older server's name", "2", ops("create", "resume", "evict"), "evict", "op3"},
		{"a snapshot does not cut, the suspend after it does", "1", ops("create", "snapshot", "suspend"), "suspend", "op3"},
		{"deleted", "1", ops("create", "destroy"), "destroy", "op2"},
		{"the suspend came before the command", "3", ops("create", "resume", "suspend"), "", ""},
		{"only a snapshot since", "1", ops("create", "snapshot"), "", ""},
		{"no epoch header (an older server)", "", ops("create", "evict"), "", ""},
	}
	for _, tt := range tests {
		for _, ws := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ws=%v", tt.name, ws), func(t *testing.T) {
				t.Parallel()
				sc := client.New(cutServer(t, tt.epoch, tt.ops), "").Sessions()
				var out bytes.Buffer
				var err error
				if ws {
					_, err = sc.ExecWSIO(t.Context(), "s1", apiv1.ExecStart{Argv: []string{"x"}}, client.ExecIO{Stdout: &out})
				} else {
					_, err = sc.Exec(t.Context(), "s1", apiv1.ExecRequest{Argv: []string{"x"}}, &out, nil)
				}
				if !errors.Is(err, client.ErrNoExit) || out.String() != "hi" {
					t.Fatalf("err %v, out %q; want ErrNoExit after hi", err, out.String())
				}
				var cut *client.ExecCutError
				switch {
				case tt.wantKind == "" && errors.As(err, &cut):
					t.Errorf("err %v explains the cut, want plain ErrNoExit", err)
				case tt.wantKind != "" && (!errors.As(err, &cut) || cut.Kind != tt.wantKind || cut.OpID != tt.wantOp):
					t.Errorf("err %v, want cut by %s %s", err, tt.wantKind, tt.wantOp)
				case (tt.wantKind == "suspend" || tt.wantKind == "evict") && (!cut.Suspended() || cut.What() != "the session was suspended"):
					t.Errorf("%v: Suspended() false", err)
				}
			})
		}
	}
}
