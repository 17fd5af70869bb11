# Sourced by test.sh: make sure a PostgreSQL server answers on 127.0.0.1:5432
# and export ENGRAMS_TEST_POSTGRES with a URL tests can create databases with.
if [ -n "${ENGRAMS_TEST_POSTGRES:-}" ]; then
  return 0
fi
pg_url="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
if command -v psql >/dev/null && psql "$pg_url" -Atc 'select 1' >/dev/null 2>&1; then
  export ENGRAMS_TEST_POSTGRES="$pg_url"
  return 0
fi
echo "== no passwordless PostgreSQL on 127.0.0.1:5432: installing/starting one"
if ! command -v pg_ctlcluster >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null
fi
ver=$(ls /etc/postgresql | sort -V | tail -n1)
pg_ctlcluster --skip-systemctl-redirect "$ver" main start 2>/dev/null || true
for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 && break; sleep 1; done
su postgres -c "psql -q -c \"ALTER USER postgres PASSWORD 'engrams-test'\"" >/dev/null
export ENGRAMS_TEST_POSTGRES="postgres://postgres:engrams-test@127.0.0.1:5432/postgres?sslmode=disable"
