package sqlite

import (
	"database/sql"
	"io/fs"
	"path/filepath"
	"testing"

	msqlite "modernc.org/sqlite"

	"github.com/pressly/goose/v3"

	"github.com/engrams/engrams/internal/domain"
)

// TestMigrationMakesTheFirstOrganisation: a database as the previous
// release left it (schema 18, a user token, a host and its token) is
// carried into the first organisation: its user token becomes a personal
// key of the first owner (who keeps every grant: owner and fleet
// operator), the host token stays a host token.
func TestMigrationMakesTheFirstOrganisation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	db := sql.OpenDB(connector{drv: &msqlite.Driver{}, dsn: path + "?" + dsnParams})
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), 18); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO api_tokens (id, name, kind, host_id, prefix, hash, created_at) VALUES ('t-user', 'bootstrap', 'user', '', 'egr_ab', 'h-user', 1)`,
		`INSERT INTO api_tokens (id, name, kind, host_id, prefix, hash, created_at) VALUES ('t-host', 'host a', 'host', 'host-a', 'egr_cd', 'h-host', 2)`,
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	st, err := Open(t.Context(), Config{Path: path}, Deps{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	user, err := st.TokenByHash(t.Context(), "h-user")
	if err != nil {
		t.Fatal(err)
	}
	if user.Kind != domain.TokenUser || user.OrgID != domain.FirstOrg || user.UserID != domain.FirstOwner || user.Role != domain.RoleOwner || user.Name != "bootstrap" {
		t.Fatalf("the old user token = %+v, want the first owner's personal key", user)
	}
	host, err := st.TokenByHash(t.Context(), "h-host")
	if err != nil {
		t.Fatal(err)
	}
	if host.Kind != domain.TokenHost || host.HostID != "host-a" || host.OrgID != "" || host.Role != "" {
		t.Fatalf("the old host token = %+v", host)
	}
	m, err := st.GetMember(t.Context(), domain.FirstOrg, domain.FirstOwner)
	if err != nil {
		t.Fatal(err)
	}
	if m.Role != domain.RoleOwner || !m.User.FleetOperator {
		t.Fatalf("first owner = %+v", m)
	}
}
