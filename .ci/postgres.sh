# Sourced by .ci/run: start a throw-away PostgreSQL on 127.0.0.1:55432 so the store tests also run against it.
# Exports REPLISCOPE_TEST_POSTGRES on success; on any failure says why and leaves the variable unset (those
# tests then run on SQLite only).
start_test_postgres() {
  local pgbin
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$pgbin" ] || [ ! -x "$pgbin/postgres" ] || ! id postgres >/dev/null 2>&1; then
    echo "ci: installing PostgreSQL for the store tests"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) || {
      echo "ci: PostgreSQL could not be installed; store tests run on SQLite only"; return 0; }
    pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  PGDATA_CI=$(mktemp -d /tmp/repliscope-pg.XXXXXX)
  chown postgres "$PGDATA_CI"
  if su postgres -s /bin/sh -c "$pgbin/initdb -D $PGDATA_CI -A trust -U postgres >/dev/null" &&
     su postgres -s /bin/sh -c "$pgbin/pg_ctl -D $PGDATA_CI -l $PGDATA_CI/log -w \
        -o '-p 55432 -k /tmp -c listen_addresses=127.0.0.1' start >/dev/null"; then
    export REPLISCOPE_TEST_POSTGRES="postgresql+psycopg://postgres@127.0.0.1:55432/postgres"
    trap 'su postgres -s /bin/sh -c "'"$pgbin"'/pg_ctl -D '"$PGDATA_CI"' -m fast stop >/dev/null"; rm -rf '"$PGDATA_CI" EXIT
    echo "ci: PostgreSQL running at 127.0.0.1:55432"
  else
    echo "ci: PostgreSQL did not start; store tests run on SQLite only"
  fi
}
