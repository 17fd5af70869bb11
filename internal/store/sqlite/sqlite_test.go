package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/store/storetest"
)

func open(tb testing.TB) *sqlite.Store {
	tb.Helper()
	st, err := sqlite.Open(tb.Context(), sqlite.Config{Path: filepath.Join(tb.TempDir(), "engrams.db")}, sqlite.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

func TestReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "engrams.db")
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	sess, _, _, err := st.CreateSession(t.Context(), store.NewSession{ID: "s1", OpID: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	// Migrations are not applied twice and the data is still there.
	st, err = sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.GetSession(t.Context(), "s1")
	if err != nil || got.ID != sess.ID {
		t.Fatalf("after reopen: %+v, %v", got, err)
	}
}

func TestOpenRejectsBadPath(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "x.db?mode=ro", "file:x.db"} {
		if st, err := sqlite.Open(t.Context(), sqlite.Config{Path: p}, sqlite.Deps{}); err == nil {
			st.Close()
			t.Errorf("Open(%q) succeeded", p)
		}
	}
}

func BenchmarkCreateDeleteSession(b *testing.B) {
	st := open(b)
	defer st.Close()
	storetest.BenchCreateDelete(b, st)
}
