# Sourced by .ci/run: start a throw-away PostgreSQL on 127.0.0.1:55432 so the store tests also run against it.
# Exports REPLISCOPE_TEST_POSTGRES on success; on any failure says why and leaves the variable unset (those
# tests then run on SQLite only).
start_test_postgres() {
  local pgbin
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$pgbin" ] || [ ! -x "$pgbin/postgres" ]; then
    echo "ci: installing PostgreSQL for the store tests"
    local sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then
      if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo_cmd="sudo -n"; else
        echo "ci: PostgreSQL missing and no root or passwordless sudo to install it; store tests run on SQLite only"
        return 0
      fi
    fi
    ($sudo_cmd apt-get update -qq && $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) || {
      echo "ci: PostgreSQL could not be installed; store tests run on SQLite only"; return 0; }
    pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    [ -n "$pgbin" ] || { echo "ci: PostgreSQL installed but no server binaries found; store tests run on SQLite only"; return 0; }
  fi
  # as root the server runs as the postgres user; as anyone else it runs as that user (initdb refuses root)
  local run_as="sh -c"
  PGDATA_CI=$(mktemp -d /tmp/repliscope-pg.XXXXXX)
  if [ "$(id -u)" = 0 ]; then
    run_as="su postgres -s /bin/sh -c"
    chown postgres "$PGDATA_CI" || { echo "ci: cannot hand $PGDATA_CI to postgres; store tests run on SQLite only"; return 0; }
  fi
  if $run_as "$pgbin/initdb -D $PGDATA_CI -A trust -U postgres >/dev/null" &&
     $run_as "$pgbin/pg_ctl -D $PGDATA_CI -l $PGDATA_CI/log -w -o '-p 55432 -k /tmp -c listen_addresses=127.0.0.1' start >/dev/null"; then
    export REPLISCOPE_TEST_POSTGRES="postgresql+psycopg://postgres@127.0.0.1:55432/postgres"
    # shellcheck disable=SC2064
    trap "$run_as '$pgbin/pg_ctl -D $PGDATA_CI -m fast stop >/dev/null'; rm -rf '$PGDATA_CI'" EXIT
    echo "ci: PostgreSQL running at 127.0.0.1:55432"
  else
    echo "ci: PostgreSQL did not start; store tests run on SQLite only"
  fi
}
