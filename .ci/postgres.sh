# Sourced by test.sh: a PostgreSQL server on 127.0.0.1 for the sink tests
# (THUND_PG_URL), stopped when the tests end. A THUND_PG_URL already set is
# used as it is. PostgreSQL 15+ is installed with apt-get when it is missing.
if [ -z "${THUND_PG_URL:-}" ]; then
  pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
  pg=$(pg_bin)
  if [ -z "$pg" ]; then
    echo "test.sh: installing PostgreSQL for the sink tests (apt-get install postgresql)" >&2
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
    pg=$(pg_bin)
  fi
  pg_dir=$(mktemp -d /tmp/thund-pg.XXXXXX)
  pg_as=()
  if [ "$(id -u)" = 0 ]; then
    # initdb refuses to run as root
    chown postgres "$pg_dir"
    pg_as=(runuser -u postgres --)
  fi
  "${pg_as[@]}" "$pg/initdb" -D "$pg_dir/data" -U thund -A trust --no-sync >/dev/null
  pg_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "${pg_as[@]}" "$pg/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir -c fsync=off -c max_connections=300" \
    start >/dev/null
  pg_stop() {
    "${pg_as[@]}" "$pg/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  }
  trap pg_stop EXIT
  export THUND_PG_URL="postgres://thund@127.0.0.1:$pg_port/postgres"
  echo "test.sh: PostgreSQL on $THUND_PG_URL" >&2
fi
