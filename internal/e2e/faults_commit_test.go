package e2e

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	msqlite "modernc.org/sqlite"

	"github.com/engrams/engrams/api/apiv1"
	"github.com/engrams/engrams/client"
	"github.com/engrams/engrams/internal/domain"
	"github.com/engrams/engrams/internal/server"
	"github.com/engrams/engrams/internal/store"
	"github.com/engrams/engrams/internal/testutil"
)

// commitBlocker holds a lock that makes the coordinator's snapshot commit
// wait, from outside its process.
type commitBlocker interface {
	// lock takes the lock; from then on no snapshot commit completes.
	lock(ctx context.Context) error
	// blocked reports whether a commit is seen waiting behind the lock;
	// true when the database cannot tell.
	blocked(ctx context.Context) (bool, error)
	release() error
}

// sqliteBlocker holds SQLite's write lock (BEGIN IMMEDIATE): every writer,
// the coordinator's commit included, waits for it.
type sqliteBlocker struct {
	db   *sql.DB
	conn *sql.Conn
}

type sqliteConnector struct{ dsn string }

func (c sqliteConnector) Connect(context.Context) (driver.Conn, error) {
	return (&msqlite.Driver{}).Open(c.dsn)
}
func (c sqliteConnector) Driver() driver.Driver { return &msqlite.Driver{} }

func newSQLiteBlocker(path string) *sqliteBlocker {
	return &sqliteBlocker{db: sql.OpenDB(sqliteConnector{dsn: path + "?_pragma=busy_timeout(10000)"})}
}

func (b *sqliteBlocker) lock(ctx context.Context) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("lock sqlite: %w", err)
	}
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		conn.Close()
		return fmt.Errorf("lock sqlite: %w", err)
	}
	b.conn = conn
	return nil
}

func (b *sqliteBlocker) blocked(context.Context) (bool, error) { return true, nil }

func (b *sqliteBlocker) release() error {
	if b.conn == nil {
		return b.db.Close()
	}
	conn := b.conn
	b.conn = nil
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		return fmt.Errorf("unlock sqlite: %w", err)
	}
	return nil
}

// pgBlocker holds a SHARE lock on the snapshots table: readers go on,
// the commit's INSERT waits, and pg_stat_activity shows it waiting.
type pgBlocker struct {
	url  string
	conn *pgx.Conn
	tx   pgx.Tx
}

func (b *pgBlocker) lock(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return fmt.Errorf("lock snapshots table: %w", err)
	}
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "LOCK TABLE session_snapshots IN SHARE MODE")
	}
	if err != nil {
		conn.Close(ctx)
		return fmt.Errorf("lock snapshots table: %w", err)
	}
	b.conn, b.tx = conn, tx
	return nil
}

func (b *pgBlocker) blocked(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return false, fmt.Errorf("look for a waiting commit: %w", err)
	}
	defer conn.Close(ctx)
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND wait_event_type = 'Lock' AND query ILIKE '%INSERT INTO session_snapshots%'`).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("look for a waiting commit: %w", err)
	}
	return n > 0, nil
}

func (b *pgBlocker) release() error {
	if b.conn == nil {
		return nil
	}
	ctx := context.Background()
	conn := b.conn
	b.conn = nil
	defer conn.Close(ctx)
	if err := b.tx.Rollback(ctx); err != nil {
		return fmt.Errorf("unlock snapshots table: %w", err)
	}
	return nil
}

// commitCase is one database of TestCoordinatorKilledBeforeCommit.
type commitCase struct {
	name string
	// open returns the database setting for `engrams server`, a store on
	// it for the test, and a blocker of its snapshot commits.
	open func(t *testing.T, dir string) (string, store.Store, commitBlocker)
}

// TestCoordinatorKilledBeforeCommit: a session's second snapshot is
// uploaded whole (chunks in S3 on loopback) while the test holds a lock
// that makes the coordinator's commit wait; the coordinator (its own
// process) is killed with SIGKILL there. No snapshot row exists for that
// attempt; after a restart on the same database the suspend's retry
// records the snapshot exactly once, and the session ends Idle at a head
// whose chunks all exist and which holds what was written before the
// suspend. On SQLite and on Postgres.
func TestCoordinatorKilledBeforeCommit(t *testing.T) {
	t.Parallel()
	tests := []commitCase{
		{name: "sqlite", open: func(t *testing.T, dir string) (string, store.Store, commitBlocker) {
			path := filepath.Join(dir, "engrams.db")
			st, err := openSQLiteFile(path)
			if err != nil {
				t.Fatalf("open sqlite: %v", err)
			}
			t.Cleanup(func() { st.Close() })
			return path, st, newSQLiteBlocker(path)
		}},
		{name: "postgres", open: func(t *testing.T, _ string) (string, store.Store, commitBlocker) {
			url := testutil.NewPostgresDB(t)
			return url, openPostgres(t, url), &pgBlocker{url: url}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			runCoordinatorKilledBeforeCommit(t, tt)
		})
	}
}

func runCoordinatorKilledBeforeCommit(t *testing.T, tt commitCase) {
	k := newCommitRig(t, tt)
	k.killBeforeCommit()
	checkNotCommitted(t, k.st, domain.SessionID(k.sid), domain.SnapshotID(k.snap1))
	startCoordinator(t, k.addr, k.database, k.coordLog, k.coordArgs...)
	k.checkRetried()
}

// commitRig is one run of TestCoordinatorKilledBeforeCommit.
type commitRig struct {
	t                  *testing.T
	database           string
	st                 store.Store
	blocker            commitBlocker
	gate               *s3Gate
	addr, coordLog     string
	coordArgs          []string
	co                 *coordProc
	c                  *client.Client
	hostDir            string
	sid, snap1, sumTwo string // the session, its first snapshot, sha256sum of a file written after it
}

// newCommitRig starts a coordinator process and a host agent process and
// leaves a session with one committed snapshot and later data written.
func newCommitRig(t *testing.T, tt commitCase) *commitRig {
	ctx := context.Background()
	dir := shortTempDir(t)
	k := &commitRig{t: t, gate: startS3Gate(t), addr: freeAddr(t), coordLog: filepath.Join(dir, "coordinator.log"),
		coordArgs: []string{"--host-lost-after", "5s", "--heartbeat-interval", "250ms"}, hostDir: filepath.Join(dir, "h")}
	k.database, k.st, k.blocker = tt.open(t, dir)
	t.Cleanup(func() { _ = k.blocker.release() })
	creds, err := server.EnsureCredentials(ctx, k.st, filepath.Join(dir, "creds.json"), "h1")
	if err != nil {
		t.Fatalf("credentials: %v", err)
	}
	k.co = startCoordinator(t, k.addr, k.database, k.coordLog, k.coordArgs...)
	if err := os.Mkdir(k.hostDir, 0o700); err != nil {
		t.Fatal(err)
	}
	startHostProcess(t, "http://"+k.addr, creds.HostToken, k.hostDir, k.gate.hostArgs()...)
	k.c = newClient("http://"+k.addr, creds.Token)
	waitHostReady(t, k.c, creds.HostID)

	s, err := k.c.Sessions().Create(ctx, apiv1.CreateSessionRequest{SessionSpec: apiv1.SessionSpec{MemoryMiB: 64, IdleTimeoutSec: -1}}, true)
	if err != nil || s.State != "active" {
		t.Fatalf("create: %+v %v", s, err)
	}
	k.sid = s.ID
	execOut(t, k.c, s.ID, "head -c 5000000 /dev/urandom > one.bin && echo one > marker1")
	idle, err := k.c.Sessions().Suspend(ctx, s.ID, true)
	if err != nil || idle.State != "idle" || idle.HeadSnapshot == "" {
		t.Fatalf("first suspend: %+v %v", idle, err)
	}
	k.snap1 = idle.HeadSnapshot
	k.sumTwo = execOut(t, k.c, s.ID, "head -c 9000000 /dev/urandom > two.bin && echo two > marker2 && sha256sum two.bin")
	return k
}

// killBeforeCommit suspends the session, takes the lock at its first
// chunk PUT, waits until the host has answered with every chunk stored
// and the commit waits, then SIGKILLs the coordinator and releases the
// lock.
func (k *commitRig) killBeforeCommit() {
	t, ctx := k.t, context.Background()
	locked := make(chan error, 1)
	k.gate.arm(func(n int) bool {
		if n == 1 {
			locked <- k.blocker.lock(ctx) // this PUT waits for the lock
		}
		return false
	})
	if _, err := k.c.Sessions().Suspend(ctx, k.sid, false); err != nil {
		t.Fatalf("second suspend: %v", err)
	}
	select {
	case err := <-locked:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the second snapshot uploaded no chunk")
	}
	k.gate.arm(nil)
	eventually(t, time.Minute, "host answered the second snapshot", func() (bool, string) {
		n := logCount(hostLog(k.hostDir), `msg="snapshot uploaded"`, k.sid)
		return n >= 2, fmt.Sprintf("%d snapshot uploads logged in %s", n, hostLog(k.hostDir))
	})
	eventually(t, time.Minute, "commit waits behind the lock", func() (bool, string) {
		ok, err := k.blocker.blocked(ctx)
		return ok, fmt.Sprint(err)
	})
	k.co.kill()
	if err := k.blocker.release(); err != nil {
		t.Fatal(err)
	}
}

// checkRetried checks that the suspend's retry recorded the snapshot once
// on top of the first, that its chunks all exist, and that it holds what
// was written before the suspend.
func (k *commitRig) checkRetried() {
	t := k.t
	end := settled(t, k.c, k.sid, 3*time.Minute)
	rows := noDuplicateSnapshots(t, k.st, end)
	if end.State != "idle" || len(rows) != 2 || rows[0].ID != domain.SnapshotID(k.snap1) || rows[1].ParentID != domain.SnapshotID(k.snap1) || end.HeadSnapshot != string(rows[1].ID) {
		t.Fatalf("after the restart: %s; want idle with the retried snapshot recorded once on top of %s", describe(end), k.snap1)
	}
	var evict apiv1.Op
	if len(end.Ops) > 0 {
		evict = end.Ops[len(end.Ops)-1]
	}
	if evict.Kind != apiv1.OpSuspend || evict.State != "succeeded" || evict.Attempts < 2 {
		t.Fatalf("last op %+v; want the suspend, succeeded on a retry", evict)
	}
	if missing := k.gate.missingChunks(t, rows[1]); len(missing) > 0 {
		t.Fatalf("head snapshot %s names %d chunks the store lacks: %v", rows[1].ID, len(missing), missing)
	}
	if out := execOut(t, k.c, k.sid, "cat marker1 marker2 && sha256sum two.bin"); out != "one\ntwo\n"+k.sumTwo {
		t.Fatalf("resumed from the retried snapshot: %q; want both markers and two.bin %q", out, k.sumTwo)
	}
}

// checkNotCommitted fails the test unless the store has no snapshot of
// the session but snap1, which is still its head.
func checkNotCommitted(t *testing.T, st store.Store, sid domain.SessionID, snap1 domain.SnapshotID) {
	t.Helper()
	ctx := context.Background()
	rows, err := st.ListSnapshots(ctx, sid)
	if err != nil {
		t.Fatalf("list snapshots: %v", err)
	}
	var ids []string
	for _, r := range rows {
		ids = append(ids, string(r.ID))
	}
	if len(rows) != 1 || rows[0].ID != snap1 {
		t.Fatalf("after the kill the store has snapshots [%s]; want only %s", strings.Join(ids, " "), snap1)
	}
	s, err := st.GetSession(ctx, sid)
	if err != nil || s.HeadSnapshotID != snap1 {
		t.Fatalf("after the kill the head is %q (%v); want %s", s.HeadSnapshotID, err, snap1)
	}
}
