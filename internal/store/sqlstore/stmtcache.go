package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// newConn returns db itself, or db behind a prepared-statement cache.
func newConn(db *sql.DB, cache bool) execer {
	if !cache {
		return db
	}
	return &cachedConn{db: db}
}

// cachedConn prepares each distinct query once (database/sql then keeps it
// prepared on every connection that runs it) and reuses it. The set of
// queries is bounded: they are constants, or built from a few options.
type cachedConn struct {
	db    *sql.DB
	stmts sync.Map // query -> *sql.Stmt
}

// stmt returns the prepared statement for q, or nil if preparing failed (the
// caller then runs q directly and gets the error from there).
func (c *cachedConn) stmt(ctx context.Context, q string) *sql.Stmt {
	if v, ok := c.stmts.Load(q); ok {
		return v.(*sql.Stmt)
	}
	st, err := c.db.PrepareContext(ctx, q)
	if err != nil {
		return nil
	}
	if v, loaded := c.stmts.LoadOrStore(q, st); loaded {
		_ = st.Close()
		return v.(*sql.Stmt)
	}
	return st
}

// cached returns the statement for q if it is already prepared.
func (c *cachedConn) cached(q string) *sql.Stmt {
	if v, ok := c.stmts.Load(q); ok {
		return v.(*sql.Stmt)
	}
	return nil
}

// warm prepares queries a transaction ran uncached. It runs after the
// transaction ended: preparing on the database needs a free connection, and
// the write pool may have only the one the transaction held.
func (c *cachedConn) warm(ctx context.Context, queries []string) {
	for _, q := range queries {
		c.stmt(ctx, q)
	}
}

func (c *cachedConn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.db.ExecContext(ctx, q, args...)
}

func (c *cachedConn) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.db.QueryContext(ctx, q, args...)
}

func (c *cachedConn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.db.QueryRowContext(ctx, q, args...)
}

// cachedTx runs a transaction's statements through its connection's cache.
// Queries not prepared yet run directly and are remembered for warm.
type cachedTx struct {
	conn   *cachedConn
	tx     *sql.Tx
	missed []string
}

func (t *cachedTx) lookup(q string) *sql.Stmt {
	st := t.conn.cached(q)
	if st == nil {
		t.missed = append(t.missed, q)
	}
	return st
}

func (t *cachedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if st := t.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, q, args...)
}

func (t *cachedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := t.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, q, args...)
}

func (t *cachedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := t.lookup(q); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, q, args...)
}

// Close closes every cached statement.
func (c *cachedConn) Close() {
	c.stmts.Range(func(k, v any) bool {
		_ = v.(*sql.Stmt).Close()
		c.stmts.Delete(k)
		return true
	})
}
