package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/store/sqlstore"
)

//go:embed migrations/*.sql
var migrations embed.FS

// channel is the one LISTEN/NOTIFY channel; the payload is the topic.
const channel = "engrams_wake"

// Config says which database to use.
type Config struct {
	// URL is a libpq-style connection string or postgres:// URL.
	URL string
	// MaxConns caps the connection pool (the listener adds one); 0 means 16.
	MaxConns int
}

// Deps are the collaborators a Store uses.
type Deps struct {
	Logger *slog.Logger // nil discards
}

// Store is a store.Store on Postgres.
type Store struct {
	*sqlstore.Store
	db     *sql.DB
	hub    *sqlstore.Hub
	log    *slog.Logger
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

var _ store.Store = (*Store)(nil)

// Open connects, applies pending migrations, starts listening for wake-ups
// and returns the store. Close releases it.
func Open(ctx context.Context, cfg Config, deps Deps) (*Store, error) {
	log := deps.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	connCfg, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: parse url: %w", err)
	}
	db := stdlib.OpenDB(*connCfg)
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = 16
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	schema, err := migrate(ctx, db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	listener, err := listen(ctx, connCfg)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open postgres store: %w", err)
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s := &Store{
		Store:  sqlstore.New(sqlstore.Config{Write: db, IsUniqueViolation: isUniqueViolation, Schema: schema}),
		db:     db,
		hub:    sqlstore.NewHub(),
		log:    log,
		cancel: cancel,
	}
	s.wg.Add(1)
	go s.runListener(lctx, connCfg, listener)
	return s, nil
}

// migrate applies the embedded migrations and returns the newest one's
// version.
func migrate(ctx context.Context, db *sql.DB) (schema int64, err error) {
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return 0, fmt.Errorf("migrations: %w", err)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return 0, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub,
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true))
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
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// Notify implements store.Store: local subscribers wake at once, other
// replicas through NOTIFY.
func (s *Store) Notify(ctx context.Context, topic string) error {
	s.hub.Wake(topic)
	if _, err := s.db.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, topic); err != nil {
		return fmt.Errorf("notify %s: %w", topic, err)
	}
	return nil
}

// Subscribe implements store.Store.
func (s *Store) Subscribe(ctx context.Context, topic string) <-chan struct{} {
	return s.hub.Subscribe(ctx, topic)
}

// Close stops the listener, closes every subscription and the pool.
func (s *Store) Close() error {
	var err error
	s.once.Do(func() {
		s.cancel()
		s.wg.Wait()
		s.hub.Close()
		s.CloseStatements()
		if cerr := s.db.Close(); cerr != nil {
			err = fmt.Errorf("close postgres store: %w", cerr)
		}
	})
	return err
}
