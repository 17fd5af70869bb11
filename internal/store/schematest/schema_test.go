package schematest_test

// TestSchemasMatch migrates a fresh Postgres database and a fresh SQLite file
// with the backends' own Open (so exactly the embedded migrations run), reads
// both schemas back from the catalogs and compares them as sets of facts.
//
// What is compared, and why it can be compared reliably:
//
//   - tables: names (goose's own version table is left out).
//   - columns: names, NOT NULL, the default and a type family. The families are
//     what SQLite's declared types can tell apart: integer, text, bytes, real,
//     timestamp. Two Postgres types collapse because the SQLite migrations
//     declare them with another type by convention: boolean is INTEGER 0/1 and
//     json is TEXT. So text vs integer or bytes vs text is caught, boolean vs
//     bigint or json vs text is not (SQLite's catalog cannot say it). Sizes
//     (integer vs bigint) are not compared: SQLite integers are all 64-bit.
//   - defaults: Postgres's casts are dropped ('' ::text → '', '-1'::integer →
//     -1), false/true read as 0/1, no default and DEFAULT NULL are the same.
//     That is exact for literal defaults, the only kind the migrations use; an
//     expression default would be compared as its text and likely differ.
//   - the primary key's columns in order, and every foreign key: its columns,
//     the referenced table and columns, ON DELETE and ON UPDATE.
//   - indexes: name, unique, key columns in order (with DESC), partial or not.
//     The index behind a PRIMARY KEY is the primary key fact above; an index
//     behind a UNIQUE constraint is keyed by its columns, because each
//     dialect generates its own name for it (harnesses_name_version_key vs
//     sqlite_autoindex_harnesses_2). An expression column reads "<expr>" on
//     both sides: SQLite's catalog does not give the expression.
//
// Not compared: column order (ALTER TABLE ADD COLUMN appends in both, but the
// shared SQL names its columns), partial-index predicates and CHECK
// expressions (Postgres keeps them rewritten — IN (...) becomes
// = ANY (ARRAY[...]), with casts — so their text differs when they agree),
// collations, and index INCLUDE columns (SQLite has none).

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/engrams/engrams/internal/store/postgres"
	"github.com/engrams/engrams/internal/store/sqlite"
	"github.com/engrams/engrams/internal/testutil"
)

// gooseTable is the migration tool's bookkeeping, not part of the schema.
const gooseTable = "goose_db_version"

// schema is a set of facts: key (what the fact is about) → description.
type schema map[string]string

func TestSchemasMatch(t *testing.T) {
	t.Parallel()
	lite := sqliteSchema(t)
	checkSane(t, "sqlite", lite)
	pg := postgresSchema(t) // skips without Postgres (fails under CI)
	checkSane(t, "postgres", pg)
	if diffs := compare(pg, lite); len(diffs) > 0 {
		t.Errorf("the Postgres and SQLite schemas differ after migrating (fix it with a new migration in the dialect that is wrong):\n\t%s",
			strings.Join(diffs, "\n\t"))
	}
}

// checkSane fails if introspection found next to nothing: an empty schema on
// both sides must not pass.
func checkSane(t *testing.T, name string, s schema) {
	t.Helper()
	if _, ok := s["column sessions.id"]; !ok || len(s) < 50 {
		t.Fatalf("%s: introspection found %d facts and no sessions.id column; the test is broken", name, len(s))
	}
}

// compare lists every fact that is in one schema only or described
// differently, sorted.
func compare(pg, lite schema) []string {
	var diffs []string
	for k, p := range pg {
		switch l, ok := lite[k]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: only in postgres (%s)", k, p))
		case l != p:
			diffs = append(diffs, fmt.Sprintf("%s: postgres %s, sqlite %s", k, p, l))
		}
	}
	for k, l := range lite {
		if _, ok := pg[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: only in sqlite (%s)", k, l))
		}
	}
	slices.Sort(diffs)
	return diffs
}

func columnFact(s schema, table, col, family string, notNull bool, dflt string) {
	n := "NULL"
	if notNull {
		n = "NOT NULL"
	}
	d := normalizeDefault(dflt, family)
	if d == "" {
		d = "none"
	}
	s[fmt.Sprintf("column %s.%s", table, col)] = fmt.Sprintf("%s %s default %s", family, n, d)
}

// indexFact records a non-primary-key index; constraint says it backs a
// UNIQUE constraint, whose name is generated differently per dialect.
func indexFact(s schema, table, name string, unique, partial, constraint bool, cols []string) {
	key := fmt.Sprintf("index %s.%s", table, name)
	if constraint {
		key = fmt.Sprintf("index %s.<unique constraint on %s>", table, strings.Join(cols, ", "))
	}
	kind := "plain"
	if unique {
		kind = "unique"
	}
	if partial {
		kind += " partial"
	}
	s[key] = fmt.Sprintf("%s (%s)", kind, strings.Join(cols, ", "))
}

func foreignKeyFact(s schema, table string, cols []string, ref string, refCols []string, onDelete, onUpdate string) {
	s[fmt.Sprintf("foreign key %s (%s)", table, strings.Join(cols, ", "))] = fmt.Sprintf("references %s (%s) on delete %s on update %s",
		ref, strings.Join(refCols, ", "), strings.ToLower(onDelete), strings.ToLower(onUpdate))
}

var pgCast = regexp.MustCompile(`::[a-z][a-z0-9_ ]*(\[\])?$`)

// normalizeDefault maps both dialects' spelling of a literal default to one
// form; "" is no default.
func normalizeDefault(d, family string) string {
	d = strings.TrimSpace(d)
	for {
		prev := d
		d = pgCast.ReplaceAllString(d, "")
		if strings.HasPrefix(d, "(") && strings.HasSuffix(d, ")") {
			d = d[1 : len(d)-1]
		}
		if d == prev {
			break
		}
	}
	switch strings.ToLower(d) {
	case "null":
		return ""
	case "false":
		return "0"
	case "true":
		return "1"
	}
	if family == "integer" || family == "real" {
		d = strings.Trim(d, "'")
	}
	return d
}

func pgFamily(dataType string) string {
	switch t := strings.ToLower(dataType); {
	case t == "smallint" || t == "integer" || t == "bigint":
		return "integer"
	case t == "boolean": // SQLite: INTEGER 0/1
		return "integer"
	case t == "text" || strings.HasPrefix(t, "character"):
		return "text"
	case t == "json" || t == "jsonb": // SQLite: TEXT
		return "text"
	case t == "bytea":
		return "bytes"
	case t == "real" || t == "double precision" || t == "numeric":
		return "real"
	case strings.HasPrefix(t, "timestamp") || t == "date" || strings.HasPrefix(t, "time"):
		return "timestamp"
	default:
		return "other(" + t + ")"
	}
}

// sqliteFamily follows SQLite's type affinity rules, with the names this
// project would use for booleans, JSON and times.
func sqliteFamily(declared string) string {
	switch t := strings.ToUpper(declared); {
	case strings.Contains(t, "BOOL"):
		return "integer"
	case strings.Contains(t, "JSON"):
		return "text"
	case strings.Contains(t, "INT"):
		return "integer"
	case strings.Contains(t, "CHAR") || strings.Contains(t, "CLOB") || strings.Contains(t, "TEXT"):
		return "text"
	case t == "" || strings.Contains(t, "BLOB"):
		return "bytes"
	case strings.Contains(t, "REAL") || strings.Contains(t, "FLOA") || strings.Contains(t, "DOUB") ||
		strings.Contains(t, "NUMERIC") || strings.Contains(t, "DECIMAL"):
		return "real"
	case strings.Contains(t, "DATE") || strings.Contains(t, "TIME"):
		return "timestamp"
	default:
		return "other(" + t + ")"
	}
}

func postgresSchema(t *testing.T) schema {
	t.Helper()
	url := testutil.NewPostgresDB(t)
	st, err := postgres.Open(t.Context(), postgres.Config{URL: url}, postgres.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	s := schema{}
	pgQuery(t, conn, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> $1`,
		func(r pgx.Rows) error {
			var name string
			err := r.Scan(&name)
			s["table "+name] = "present"
			return err
		}, gooseTable)
	pgQuery(t, conn, `SELECT c.table_name, c.column_name, c.data_type, c.is_nullable = 'NO', coalesce(c.column_default, '')
		FROM information_schema.columns c JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE' AND c.table_name <> $1`,
		func(r pgx.Rows) error {
			var table, col, typ, dflt string
			var notNull bool
			err := r.Scan(&table, &col, &typ, &notNull, &dflt)
			columnFact(s, table, col, pgFamily(typ), notNull, dflt)
			return err
		}, gooseTable)
	pgQuery(t, conn, `SELECT t.relname, ic.relname, i.indisunique, i.indisprimary, i.indpred IS NOT NULL,
			EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid AND k.contype = 'u'),
			ARRAY(SELECT CASE WHEN i.indkey[k-1] = 0 THEN '<expr>'
					ELSE (SELECT a.attname::text FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = i.indkey[k-1]) END
				|| CASE WHEN i.indoption[k-1] & 1 = 1 THEN ' DESC' ELSE '' END
				FROM generate_series(1, i.indnkeyatts) k ORDER BY k)
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
			JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = current_schema() AND t.relkind = 'r' AND t.relname <> $1`,
		func(r pgx.Rows) error {
			var table, name string
			var unique, primary, partial, constraint bool
			var cols []string
			err := r.Scan(&table, &name, &unique, &primary, &partial, &constraint, &cols)
			if primary {
				s["primary key "+table] = "(" + strings.Join(cols, ", ") + ")"
			} else {
				indexFact(s, table, name, unique, partial, constraint, cols)
			}
			return err
		}, gooseTable)
	pgQuery(t, conn, `SELECT t.relname,
			ARRAY(SELECT a.attname::text FROM unnest(k.conkey) WITH ORDINALITY u(n, o)
				JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n ORDER BY u.o),
			r.relname,
			ARRAY(SELECT a.attname::text FROM unnest(k.confkey) WITH ORDINALITY u(n, o)
				JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n ORDER BY u.o),
			k.confdeltype::text, k.confupdtype::text
		FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid JOIN pg_class r ON r.oid = k.confrelid
			JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE k.contype = 'f' AND n.nspname = current_schema()`,
		func(r pgx.Rows) error {
			var table, ref, del, upd string
			var cols, refCols []string
			err := r.Scan(&table, &cols, &ref, &refCols, &del, &upd)
			foreignKeyFact(s, table, cols, ref, refCols, pgAction[del], pgAction[upd])
			return err
		})
	return s
}

// pgAction spells pg_constraint's action codes the way SQLite's
// foreign_key_list does.
var pgAction = map[string]string{"a": "NO ACTION", "r": "RESTRICT", "c": "CASCADE", "n": "SET NULL", "d": "SET DEFAULT"}

func pgQuery(t *testing.T, conn *pgx.Conn, q string, row func(pgx.Rows) error, args ...any) {
	t.Helper()
	rows, err := conn.Query(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func sqliteSchema(t *testing.T) schema {
	t.Helper()
	path := filepath.Join(t.TempDir(), "schema.db")
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: path}, sqlite.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path) // the driver modernc.org/sqlite registers
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables []string
	liteQuery(t, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' AND name <> ?`,
		func(r *sql.Rows) error {
			var name string
			err := r.Scan(&name)
			tables = append(tables, name)
			return err
		}, gooseTable)
	s := schema{}
	for _, table := range tables {
		s["table "+table] = "present"
		sqliteTable(t, db, s, table)
	}
	return s
}

func sqliteTable(t *testing.T, db *sql.DB, s schema, table string) {
	pk := primaryKey(t, db, table)
	liteQuery(t, db, `SELECT name, type, "notnull", dflt_value FROM pragma_table_info(?)`,
		func(r *sql.Rows) error {
			var col, typ string
			var notNull bool
			var dflt sql.NullString
			err := r.Scan(&col, &typ, &notNull, &dflt)
			// An INTEGER PRIMARY KEY is the rowid: never NULL, whatever
			// table_info says. Other key columns may hold NULL in SQLite
			// unless declared NOT NULL, so for them table_info is the truth.
			if len(pk) == 1 && pk[0] == col && strings.EqualFold(typ, "INTEGER") {
				notNull = true
			}
			columnFact(s, table, col, sqliteFamily(typ), notNull, dflt.String)
			return err
		}, table)
	if len(pk) > 0 {
		s["primary key "+table] = "(" + strings.Join(pk, ", ") + ")"
	}
	type idx struct {
		name, origin    string
		unique, partial bool
	}
	var idxs []idx
	liteQuery(t, db, `SELECT name, "unique", origin, partial FROM pragma_index_list(?)`,
		func(r *sql.Rows) error {
			var i idx
			err := r.Scan(&i.name, &i.unique, &i.origin, &i.partial)
			idxs = append(idxs, i)
			return err
		}, table)
	for _, i := range idxs {
		if i.origin == "pk" {
			continue // the primary key fact
		}
		var cols []string
		liteQuery(t, db, `SELECT cid, coalesce(name, ''), "desc" FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno`,
			func(r *sql.Rows) error {
				var cid int
				var name string
				var desc bool
				err := r.Scan(&cid, &name, &desc)
				if cid == -2 {
					name = "<expr>"
				}
				if desc {
					name += " DESC"
				}
				cols = append(cols, name)
				return err
			}, i.name)
		indexFact(s, table, i.name, i.unique, i.partial, i.origin == "u", cols)
	}
	sqliteForeignKeys(t, db, s, table)
}

func primaryKey(t *testing.T, db *sql.DB, table string) []string {
	var pk []string
	liteQuery(t, db, `SELECT name FROM pragma_table_info(?) WHERE pk > 0 ORDER BY pk`,
		func(r *sql.Rows) error {
			var col string
			err := r.Scan(&col)
			pk = append(pk, col)
			return err
		}, table)
	return pk
}

func sqliteForeignKeys(t *testing.T, db *sql.DB, s schema, table string) {
	type fk struct {
		ref, onDelete, onUpdate string
		cols, refCols           []string
	}
	byID := map[int]*fk{}
	var ids []int
	liteQuery(t, db, `SELECT id, "table", "from", "to", on_update, on_delete FROM pragma_foreign_key_list(?) ORDER BY id, seq`,
		func(r *sql.Rows) error {
			var id int
			var ref, from, upd, del string
			var to sql.NullString
			err := r.Scan(&id, &ref, &from, &to, &upd, &del)
			f := byID[id]
			if f == nil {
				f = &fk{ref: ref, onDelete: del, onUpdate: upd}
				byID[id] = f
				ids = append(ids, id)
			}
			f.cols = append(f.cols, from)
			f.refCols = append(f.refCols, to.String)
			return err
		}, table)
	for _, id := range ids {
		f := byID[id]
		if slices.Contains(f.refCols, "") { // REFERENCES t without columns: t's primary key
			f.refCols = primaryKey(t, db, f.ref)
		}
		foreignKeyFact(s, table, f.cols, f.ref, f.refCols, f.onDelete, f.onUpdate)
	}
}

func liteQuery(t *testing.T, db *sql.DB, q string, row func(*sql.Rows) error, args ...any) {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), q, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			t.Fatal(err)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
