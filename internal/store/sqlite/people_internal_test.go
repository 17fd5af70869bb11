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
// release left it (schema 18, a user token, a host and its token, a
// session, a task a user started and one an automation run started, with
// its session) is carried into the first organisation: its user token
// becomes a personal key of the first owner (who keeps every grant: owner
// and fleet operator), the host token stays a host token, the user's task
// and session become the first owner's, the run's the organisation's;
// its profiles (usable by every member) and secrets the organisation's.
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
		`INSERT INTO sessions (id, state, desired_state, spec, created_at, updated_at) VALUES ('s-user', 'running', 'active', '{"memory_mib":256}', 3, 3)`,
		`INSERT INTO sessions (id, state, desired_state, spec, created_at, updated_at) VALUES ('s-run', 'running', 'active', '{"memory_mib":256}', 4, 4)`,
		`INSERT INTO profiles (id, name, version, created_at, updated_at) VALUES ('p1', 'default', 1, 5, 5)`,
		`INSERT INTO tasks (id, profile_id, profile_version, state, session_id, created_at, updated_at, started_by) VALUES ('t-user', 'p1', 1, 'running', 's-user', 6, 6, 'bootstrap')`,
		`INSERT INTO tasks (id, profile_id, profile_version, state, session_id, created_at, updated_at, run_id) VALUES ('t-run', 'p1', 1, 'running', 's-run', 7, 7, 'run-1')`,
		`INSERT INTO secrets (id, kind, name, sealed, created_at) VALUES ('sec-gh', 'git_https', 'gh', x'01', 8)`,
		`INSERT INTO secrets (id, kind, name, sealed, created_at) VALUES ('sec-gw', 'gateway_key', 'engrams-gateway-key', x'02', 9)`,
		`INSERT INTO images (id, name, ref, digest, state, created_at, updated_at) VALUES ('img-1', 'debian', 'debian:12', '', 'ready', 10, 10)`,
		`INSERT INTO automations (id, name, enabled, version, trigger_kind, created_at, updated_at) VALUES ('a-1', 'nightly', 1, 1, 'schedule', 11, 11)`,
		`INSERT INTO automation_runs (id, automation_id, version, state, trigger_kind, created_at, updated_at) VALUES ('r-1', 'a-1', 1, 'succeeded', 'schedule', 12, 12)`,
		`INSERT INTO integrations (id, config, sealed, created_at, updated_at) VALUES ('slack', '{}', x'03', 13, 13)`,
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
	if m.Role != domain.RoleOwner || !m.User.FleetOperator || len(m.Groups) != 0 {
		t.Fatalf("first owner = %+v", m)
	}
	firstOwners := domain.Owner{OrgID: domain.FirstOrg, UserID: domain.FirstOwner}
	theOrgs := domain.Owner{OrgID: domain.FirstOrg, Shared: true}
	for id, want := range map[domain.SessionID]domain.Owner{"s-user": firstOwners, "s-run": theOrgs} {
		s, err := st.GetSession(t.Context(), id)
		if err != nil || s.Spec.Owner != want || s.Spec.MemoryMiB != 256 {
			t.Errorf("session %s = %+v, %v; want owner %+v", id, s.Spec, err, want)
		}
	}
	for id, want := range map[domain.TaskID]domain.Owner{"t-user": firstOwners, "t-run": theOrgs} {
		task, err := st.GetTask(t.Context(), id)
		if err != nil || task.Owner != want {
			t.Errorf("task %s owner = %+v, %v; want %+v", id, task.Owner, err, want)
		}
	}
	wantCuratedOfFirstOrg(t, st)
}

// wantCuratedOfFirstOrg: profiles, images, automations and their runs,
// integrations and the user's secrets become the first organisation's,
// and its members keep using the profiles; engrams's own key is no one's.
func wantCuratedOfFirstOrg(t *testing.T, st *Store) {
	t.Helper()
	prof, err := st.GetProfileByName(t.Context(), domain.FirstOrg, "default")
	if err != nil || prof.ID != "p1" || len(prof.Grants) != 1 || prof.Grants[0].Kind != domain.GrantEveryone {
		t.Errorf("the old profile = %+v, %v; want the first organisation's, granted to everyone", prof, err)
	}
	if img, err := st.GetImageByName(t.Context(), domain.FirstOrg, "debian"); err != nil || img.ID != "img-1" {
		t.Errorf("the old image = %+v, %v; want the first organisation's", img, err)
	}
	if a, err := st.GetAutomationByName(t.Context(), domain.FirstOrg, "nightly"); err != nil || a.ID != "a-1" {
		t.Errorf("the old automation = %+v, %v; want the first organisation's", a, err)
	}
	if r, err := st.GetRun(t.Context(), "r-1"); err != nil || r.Org != domain.FirstOrg {
		t.Errorf("the old run = %+v, %v; want the first organisation's", r, err)
	}
	if in, err := st.GetIntegration(t.Context(), domain.IntegrationSlack); err != nil || in.Org != domain.FirstOrg {
		t.Errorf("the old integration = %+v, %v; want the first organisation's", in, err)
	}
	for name, want := range map[string]domain.OrgID{"gh": domain.FirstOrg, "engrams-gateway-key": ""} {
		if sec, err := st.GetSecretByName(t.Context(), want, name); err != nil || sec.Org != want {
			t.Errorf("secret %s = %+v, %v; want organisation %q", name, sec, err, want)
		}
	}
}
