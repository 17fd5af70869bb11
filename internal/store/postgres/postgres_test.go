package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/storetest"
	"github.com/engrams/engrams/internal/testutil"
)

func open(tb testing.TB, url string) *postgres.Store {
	tb.Helper()
	st, err := postgres.Open(tb.Context(), postgres.Config{URL: url}, postgres.Deps{})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return open(t, testutil.NewPostgresDB(t)) })
}

func TestTwoInstances(t *testing.T) {
	t.Parallel()
	storetest.RunShared(t, func(t *testing.T) (store.Store, store.Store) {
		url := testutil.NewPostgresDB(t)
		return open(t, url), open(t, url)
	})
}

func TestOpenBadURL(t *testing.T) {
	t.Parallel()
	if st, err := postgres.Open(t.Context(), postgres.Config{URL: "postgres://nobody@127.0.0.1:1/x?connect_timeout=2"}, postgres.Deps{}); err == nil {
		st.Close()
		t.Fatal("Open of an unreachable server succeeded")
	}
}

func BenchmarkCreateDeleteSession(b *testing.B) {
	st := open(b, testutil.NewPostgresDB(b))
	defer st.Close()
	storetest.BenchCreateDelete(b, st)
}

// TestListenerReconnects kills the listening connections and checks that
// wake-ups from another replica get through again.
func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	url := testutil.NewPostgresDB(t)
	a, b := open(t, url), open(t, url)
	defer a.Close()
	defer b.Close()
	admin, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	ch := b.Subscribe(t.Context(), "ops")
	var killed int
	err = admin.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE 'LISTEN %'`).Scan(&killed)
	if err != nil || killed != 2 {
		t.Fatalf("terminated %d listeners (%v), want 2", killed, err)
	}
	// The first wake-up may be the one a reconnect sends; the second must
	// be a NOTIFY that travelled over the new connection.
	for range 2 {
		notifyUntilWoken(t, a, ch)
	}
}

func notifyUntilWoken(t *testing.T, from *postgres.Store, ch <-chan struct{}) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ch:
			return
		case <-tick.C:
			if err := from.Notify(t.Context(), "ops"); err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no wake-up after the listener's connection was killed")
		}
	}
}
