//go:build unix

package sqlite_test

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	msqlite "modernc.org/sqlite"

	"github.com/engrams/engrams/internal/store/sqlite"
)

// TestFileModes: the database and its -wal and -shm files are 0600 even
// under a umask that lets everyone read, and a database file another user
// could read is restricted, with a warning. Not parallel: the umask is the
// process's (parallel tests start only after this one returns).
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	cases := []struct {
		name     string
		existing os.FileMode // 0: no file before Open
		warn     bool
	}{
		{"new database", 0, false},
		{"database readable by others", 0o644, true},
		{"database already private", 0o600, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "engrams.db")
			if tc.existing != 0 {
				st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{})
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				if err := os.Chmod(path, tc.existing); err != nil {
					t.Fatal(err)
				}
			}
			var logs bytes.Buffer
			st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatalf("%s: %v (WAL mode keeps it while the store is open)", filepath.Base(p), err)
				}
				if got := fi.Mode().Perm(); got != 0o600 {
					t.Errorf("%s mode = %04o, want 0600", filepath.Base(p), got)
				}
			}
			warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "accessible to other users")
			if warned != tc.warn {
				t.Errorf("warned = %v, want %v; log:\n%s", warned, tc.warn, logs.String())
			}
		})
	}
}

// TestReadyNeedsMigrations: a database missing this build's newest
// migration is not ready, and says why.
func TestReadyNeedsMigrations(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "engrams.db")
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Ready(t.Context()); err != nil {
		t.Fatalf("fresh store: %v", err)
	}
	db := sql.OpenDB(rawConnector(path))
	defer db.Close()
	if _, err := db.Exec(`DELETE FROM goose_db_version WHERE version_id = (SELECT MAX(version_id) FROM goose_db_version)`); err != nil {
		t.Fatal(err)
	}
	err = st.Ready(t.Context())
	if err == nil || !strings.Contains(err.Error(), "migrations not applied") {
		t.Fatalf("Ready after losing a migration = %v, want migrations not applied", err)
	}
}

func rawConnector(path string) *dsnConnector { return &dsnConnector{dsn: path} }

// dsnConnector opens path with the driver directly (no global registration).
type dsnConnector struct{ dsn string }

func (c *dsnConnector) Connect(context.Context) (driver.Conn, error) {
	return (&msqlite.Driver{}).Open(c.dsn)
}
func (c *dsnConnector) Driver() driver.Driver { return &msqlite.Driver{} }
