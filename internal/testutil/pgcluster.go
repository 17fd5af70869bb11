package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
)

// PostgresCluster is a Postgres server of one test's own (initdb in a temp
// dir, a free loopback port) that the test may stop and start again; the
// shared server is never touched. Stopped and removed when the test ends.
type PostgresCluster struct {
	URL  string // database postgres as user postgres, no password
	bin  string // directory of initdb and pg_ctl
	dir  string
	port int
	as   []string // runs the tools as the postgres user when we are root
}

// NewPostgresCluster initializes and starts a cluster. Without initdb it
// skips (fails under CI).
func NewPostgresCluster(t testing.TB) *PostgresCluster {
	t.Helper()
	c := &PostgresCluster{bin: postgresBin()}
	if c.bin == "" {
		SkipOrFail(t, "no initdb and pg_ctl on PATH or under /usr/lib/postgresql")
	}
	dir, err := os.MkdirTemp("", "engrams-pg-")
	if err != nil {
		t.Fatal(err)
	}
	c.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 { // postgres refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			SkipOrFail(t, "running as root and there is no postgres user to run a cluster as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		c.as = []string{"runuser", "-u", "postgres", "--"}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
	c.run(t, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
	c.Start(t)
	t.Cleanup(func() { _ = c.pgCtl("stop", "-m", "immediate").Run() })
	return c
}

// Start starts the (stopped) cluster and waits until it accepts connections.
func (c *PostgresCluster) Start(t testing.TB) {
	t.Helper()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", c.port, c.dir)
	if out, err := c.pgCtl("start", "-w", "-l", filepath.Join(c.dir, "log"), "-o", opts).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.dir, "log"))
		t.Fatalf("start postgres on port %d: %v\n%s\n%s", c.port, err, out, log)
	}
}

// Stop stops the cluster at once (clients are cut off).
func (c *PostgresCluster) Stop(t testing.TB) {
	t.Helper()
	if out, err := c.pgCtl("stop", "-w", "-m", "immediate").CombinedOutput(); err != nil {
		t.Fatalf("stop postgres on port %d: %v\n%s", c.port, err, out)
	}
}

func (c *PostgresCluster) data() string { return filepath.Join(c.dir, "data") }

func (c *PostgresCluster) pgCtl(args ...string) *exec.Cmd {
	return c.command("pg_ctl", append([]string{"-D", c.data()}, args...)...)
}

func (c *PostgresCluster) command(tool string, args ...string) *exec.Cmd {
	argv := append(append(c.as[:len(c.as):len(c.as)], filepath.Join(c.bin, tool)), args...)
	return exec.Command(argv[0], argv[1:]...)
}

func (c *PostgresCluster) run(t testing.TB, tool string, args ...string) {
	t.Helper()
	if out, err := c.command(tool, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", tool, err, out)
	}
}

// postgresBin finds the directory holding initdb and pg_ctl: PATH first,
// then Debian's versioned directories (newest first).
func postgresBin() string {
	if p, err := exec.LookPath("initdb"); err == nil {
		if _, err := exec.LookPath("pg_ctl"); err == nil {
			return filepath.Dir(p)
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d
		}
	}
	return ""
}
