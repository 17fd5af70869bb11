package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/pressly/goose/v3"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Config says which database file to use.
type Config struct {
	// Path is the database file; it is created if missing.
	Path string
}

// Deps are the collaborators a Store uses.
type Deps struct {
	Logger *slog.Logger // nil discards
}

// Store is a store.Store on one SQLite file. Writes go through a single
// connection, so writers queue in Go instead of failing with SQLITE_BUSY;
// reads use a small pool of WAL readers.
type Store struct {
	*sqlstore.Store
	write *sql.DB
	read  *sql.DB
	hub   *sqlstore.Hub
	log   *slog.Logger
	once  sync.Once
}

var _ store.Store = (*Store)(nil)

// readers is the size of the read pool.
const readers = 4

// dsnParams apply to every connection: IMMEDIATE transactions, a busy
// timeout for other processes, WAL, foreign keys, and synchronous=NORMAL
// (durable across process crashes; WAL mode keeps the file consistent).
const dsnParams = "_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)" +
	"&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)"

// Open opens (creating if needed) the database, applies pending migrations
// and returns the store. Close releases it.
func Open(ctx context.Context, cfg Config, deps Deps) (*Store, error) {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Path == "" || strings.ContainsAny(cfg.Path, "?#") || strings.HasPrefix(cfg.Path, "file:") {
		return nil, fmt.Errorf("open sqlite store: path %q must be a plain file name", cfg.Path)
	}
	if err := restrictFiles(cfg.Path, log); err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", cfg.Path, err)
	}
	drv := &msqlite.Driver{}
	dsn := cfg.Path + "?" + dsnParams
	schema, err := migrate(ctx, sql.OpenDB(connector{drv: drv, dsn: dsn}))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", cfg.Path, err)
	}
	write := sql.OpenDB(connector{drv: drv, dsn: dsn})
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	read := sql.OpenDB(connector{drv: drv, dsn: dsn + "&_pragma=query_only(1)"})
	read.SetMaxOpenConns(readers)
	read.SetMaxIdleConns(readers)
	if err := write.PingContext(ctx); err != nil {
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", cfg.Path, err)
	}
	if err := restrictFiles(cfg.Path, log); err != nil { // the -wal and -shm files exist now
		write.Close()
		read.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", cfg.Path, err)
	}
	return &Store{
		Store: sqlstore.New(sqlstore.Config{
			Write: write, Read: read, IsUniqueViolation: isUniqueViolation, CacheStatements: true, Schema: schema,
		}),
		write: write,
		read:  read,
		hub:   sqlstore.NewHub(),
		log:   log,
	}, nil
}

// fileMode is the mode of the database file and its -wal and -shm files
// (SQLite gives those the database file's mode).
const fileMode = 0o600

// restrictFiles creates the database file with fileMode if it is missing
// and takes the group's and others' access away from it and its -wal and
// -shm files, saying so when a file had it.
func restrictFiles(path string, log *slog.Logger) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, fileMode)
	if err != nil {
		return fmt.Errorf("create database file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("create database file: %w", err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("check database file mode: %w", err)
		}
		if fi.Mode().Perm()&^fileMode == 0 {
			continue
		}
		if err := os.Chmod(p, fileMode); err != nil {
			return fmt.Errorf("restrict database file %s: %w", p, err)
		}
		log.Warn("database file was accessible to other users; restricted it to its owner",
			"path", p, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()), "now", fmt.Sprintf("%04o", fileMode))
	}
	return nil
}

// connector opens connections with our own driver value: no registration
// in database/sql's global driver table.
type connector struct {
	drv *msqlite.Driver
	dsn string
}

func (c connector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c connector) Driver() driver.Driver                        { return c.drv }

// migrate applies the embedded migrations on its own short-lived pool,
// closes it and returns the newest migration's version.
func migrate(ctx context.Context, db *sql.DB) (schema int64, err error) {
	defer db.Close()
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return 0, fmt.Errorf("migrate: %w", err)
	}
	srcs := p.ListSources() // ascending
	if len(srcs) == 0 {
		return 0, nil
	}
	return srcs[len(srcs)-1].Version, nil
}

func isUniqueViolation(err error) bool {
	var e *msqlite.Error
	if !errors.As(err, &e) {
		return false
	}
	return e.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || e.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
}

// Notify implements store.Store; the database is not shared with other
// processes, so waking local subscribers is enough.
func (s *Store) Notify(_ context.Context, topic string) error {
	s.hub.Wake(topic)
	return nil
}

// Subscribe implements store.Store.
func (s *Store) Subscribe(ctx context.Context, topic string) <-chan struct{} {
	return s.hub.Subscribe(ctx, topic)
}

// Close closes every subscription and the database.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.hub.Close()
		s.CloseStatements()
		err = errors.Join(s.read.Close(), s.write.Close())
		if err != nil {
			err = fmt.Errorf("close sqlite store: %w", err)
		}
	})
	return err
}
