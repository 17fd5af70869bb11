package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// Config wires a Store to its databases.
type Config struct {
	// Write runs every transaction and write. SQLite gives it one connection.
	Write *sql.DB
	// Read runs plain reads; Write when nil.
	Read *sql.DB
	// IsUniqueViolation reports whether err is a unique or primary-key
	// constraint violation in this dialect.
	IsUniqueViolation func(error) bool
	// CacheStatements prepares each distinct statement once per connection
	// and reuses it; for drivers without their own statement cache.
	CacheStatements bool
	// Schema is the newest migration version the backend embeds; Ready
	// wants at least that one applied.
	Schema int64
}

// Store implements every store.Store method except Notify, Subscribe and
// Close, which belong to the backend.
type Store struct {
	wdb      *sql.DB
	write    execer // every transaction and write
	read     execer // plain reads
	isUnique func(error) bool
	schema   int64
}

// New returns a Store over cfg's databases. It does not own them.
func New(cfg Config) *Store {
	read := cfg.Read
	if read == nil {
		read = cfg.Write
	}
	s := &Store{wdb: cfg.Write, isUnique: cfg.IsUniqueViolation, schema: cfg.Schema}
	s.write, s.read = newConn(cfg.Write, cfg.CacheStatements), newConn(read, cfg.CacheStatements)
	if s.isUnique == nil {
		s.isUnique = func(error) bool { return false }
	}
	return s
}

// scanner is a *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// execer runs statements on a database or in a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// inTx runs fn in a transaction on the write database.
func (s *Store) inTx(ctx context.Context, fn func(tx execer) error) error {
	tx, err := s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	var ex execer = tx
	if c, ok := s.write.(*cachedConn); ok {
		ctc := &cachedTx{conn: c, tx: tx}
		ex = ctc
		defer func() { c.warm(ctx, ctc.missed) }()
	}
	if err := fn(ex); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Ready implements store.Store: the database answers a read and its
// migrations (goose's table) reach the schema this build embeds.
func (s *Store) Ready(ctx context.Context) error {
	var v sql.NullInt64
	if err := s.read.QueryRowContext(ctx, `SELECT MAX(version_id) FROM goose_db_version`).Scan(&v); err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	if v.Int64 < s.schema {
		return fmt.Errorf("check database: schema version %d, this build needs %d: migrations not applied", v.Int64, s.schema)
	}
	return nil
}

// CloseStatements releases cached prepared statements; call it before
// closing the databases, which the backend owns.
func (s *Store) CloseStatements() {
	for _, c := range []execer{s.write, s.read} {
		if c, ok := c.(*cachedConn); ok {
			c.Close()
		}
	}
}

// micros stores a time as unix microseconds; the zero time is 0.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// fromMicros is the inverse of micros, in UTC.
func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}

// orNow returns t, or the current time when t is zero.
func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// jsonArg turns raw JSON into a query argument: NULL when empty.
func jsonArg(raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	return string(raw)
}

// fromJSON turns a scanned JSON column back into raw JSON.
func fromJSON(v sql.NullString) json.RawMessage {
	if !v.Valid {
		return nil
	}
	return json.RawMessage(v.String)
}

// typedArg encodes a typed JSON column (a session spec, host facts or
// capacity); the zero value is stored as NULL.
func typedArg(field string, v any) (any, error) {
	if reflect.ValueOf(v).IsZero() {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", field, err)
	}
	return string(b), nil
}

// decodeTyped decodes a scanned typed JSON column into v; NULL leaves v
// as it is (zero).
func decodeTyped(field string, col sql.NullString, v any) error {
	if !col.Valid || col.String == "" {
		return nil
	}
	if err := json.Unmarshal([]byte(col.String), v); err != nil {
		return fmt.Errorf("decode %s column: %w", field, err)
	}
	return nil
}

// checkJSON rejects malformed JSON before it reaches the database, so both
// dialects refuse the same input.
func checkJSON(field string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return fmt.Errorf("%s is not valid JSON", field)
	}
	return nil
}

// notFound reports sql.ErrNoRows as a store category error.
func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// placeholders returns "$from, $from+1, ..." for n arguments.
func placeholders(from, n int) string {
	b := make([]byte, 0, n*4)
	for i := range n {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "$%d", from+i)
	}
	return string(b)
}
