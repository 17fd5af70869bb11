package testutil

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// InCI reports whether the tests run under CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips the test with the reason, except under CI, where a
// capability the CI script installs must be present: there it fails.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	reason := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("CI=true but this test cannot run: %s", reason)
	}
	t.Skip(reason)
}

// PostgresURL is the server tests use; ENGRAMS_TEST_POSTGRES overrides it.
func PostgresURL() string {
	if u := os.Getenv("ENGRAMS_TEST_POSTGRES"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewPostgresDB creates a fresh database for one test and drops it at the
// end. It returns the database's URL. Without a reachable server it skips
// (fails under CI).
func NewPostgresDB(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, PostgresURL())
	if err != nil {
		SkipOrFail(t, "no Postgres at %s: %v", PostgresURL(), err)
	}
	name := "engrams_test_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:20]
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		t.Fatalf("create test database: %v", err)
	}
	admin.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, PostgresURL())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(PostgresURL())
	if err != nil {
		t.Fatalf("parse postgres url: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
