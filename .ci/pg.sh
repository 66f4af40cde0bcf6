#!/usr/bin/env bash
# Manages a project-local PostgreSQL 15 cluster that listens only on a Unix socket in DIR/run.
#
#   pg.sh start DIR [DBNAME...]   initdb if needed, start if stopped, create missing databases
#   pg.sh stop DIR                stop it (fast) if running
#   pg.sh status DIR              exit 0 if running
#   pg.sh url DIR DBNAME          print a sqlx/libpq URL that connects through the socket
#   pg.sh recreate DIR DBNAME     drop (forcing connections off) and create a database
#
# PG_FAST=1 at start trades durability for speed (fsync, synchronous_commit and
# full_page_writes off): for throwaway test clusters only.
# As root, the cluster runs as the `postgres` user (PostgreSQL refuses to run as root).
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PGPORT=5432

die() { echo "pg.sh: $*" >&2; exit 1; }
usage() { sed -n '2,8s/^# \{0,1\}//p' "$0" >&2; exit 2; }

[ $# -ge 2 ] || usage
cmd=$1 dir=$(realpath -m -- "$2")
shift 2
data=$dir/data run=$dir/run

# Runs a server-side command as the cluster's owner.
as_owner() {
  if [ "$(id -u)" = 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}
running() { [ -f "$data/PG_VERSION" ] && as_owner "$PGBIN/pg_ctl" status -D "$data" >/dev/null 2>&1; }
client() { "$PGBIN/$1" -h "$run" -p "$PGPORT" -U postgres "${@:2}"; }
db_exists() {
  [ "$(client psql -X -q -t -A -d postgres -v name="$1" <<<"select 1 from pg_database where datname = :'name'")" = 1 ]
}
create_db() { db_exists "$1" || client createdb -E UTF8 -T template0 -- "$1"; }
need_running() { running || die "no cluster running in $dir (run: $0 start $dir)"; }
lock() {
  mkdir -p "$dir"
  exec 9>>"$dir/.lock"
  flock 9
}

url_encode() {
  local s=$1 out='' c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case $c in
      [A-Za-z0-9/._~-]) out+=$c ;;
      *) out+=$(printf '%%%02X' "'$c") ;;
    esac
  done
  printf '%s' "$out"
}

start() {
  # The socket path (DIR/run/.s.PGSQL.5432) must fit in sockaddr_un (107 bytes).
  [ $((${#run} + 15)) -le 107 ] || die "socket path under $run is too long; use a shorter DIR"
  lock
  mkdir -p "$run"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir" "$run"
    [ ! -e "$dir/log" ] || chown postgres: "$dir/log"
    # The postgres user must be able to reach DIR.
    local p=$dir
    while [ "$p" != / ]; do
      p=$(dirname "$p")
      if ! runuser -u postgres -- test -x "$p"; then
        echo "pg.sh: letting the postgres user traverse $p (chmod o+x)" >&2
        chmod o+x "$p"
      fi
    done
  fi

  if [ ! -f "$data/PG_VERSION" ]; then
    [ ! -e "$data" ] || [ -z "$(ls -A "$data")" ] || die "$data exists but holds no cluster"
    local flags=()
    [ "${PG_FAST:-}" != 1 ] || flags+=(--no-sync)
    if ! out=$(as_owner "$PGBIN/initdb" -D "$data" --auth=trust -U postgres -E UTF8 \
      --locale=C "${flags[@]}" 2>&1); then
      echo "$out" >&2
      die "initdb failed"
    fi
    echo "include_if_exists = 'conveyor.conf'" >>"$data/postgresql.conf"
  fi
  [ "$(cat "$data/PG_VERSION")" = 15 ] || die "$data holds a PostgreSQL $(cat "$data/PG_VERSION") cluster, not 15"

  if ! running; then
    # Rewritten on every start, so a moved DIR or a change of PG_FAST takes effect.
    {
      echo "# Written by .ci/pg.sh on each start; edits are lost."
      echo "listen_addresses = ''"
      echo "port = $PGPORT"
      echo "unix_socket_directories = '${run//\'/\'\'}'"
      echo "max_connections = 200"
      echo "shared_buffers = 256MB"
      echo "timezone = 'UTC'"
      echo "log_timezone = 'UTC'"
      echo "log_min_messages = warning"
      if [ "${PG_FAST:-}" = 1 ]; then
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
      fi
    } >"$data/conveyor.conf"
    [ "$(id -u)" != 0 ] || chown postgres: "$data/conveyor.conf"
    # 9>&-: the server must not inherit (and so hold forever) the lock.
    if ! as_owner "$PGBIN/pg_ctl" start -D "$data" -l "$dir/log" -w -t 120 -s 9>&-; then
      tail -n 20 "$dir/log" >&2 || true
      die "could not start the cluster in $dir (log: $dir/log)"
    fi
    echo "pg.sh: cluster running in $dir (socket $run)" >&2
  fi
  local db
  for db in "$@"; do create_db "$db"; done
}

case $cmd in
  start) start "$@" ;;
  stop)
    [ $# = 0 ] || usage
    if running; then
      lock
      as_owner "$PGBIN/pg_ctl" stop -D "$data" -m fast -w -t 120 -s
      echo "pg.sh: cluster in $dir stopped" >&2
    fi
    ;;
  status)
    [ $# = 0 ] || usage
    running
    ;;
  url)
    [ $# = 1 ] || usage
    printf 'postgres://postgres@localhost/%s?host=%s\n' "$(url_encode "$1")" "$(url_encode "$run")"
    ;;
  recreate)
    [ $# = 1 ] || usage
    need_running
    lock
    PGOPTIONS="-c client_min_messages=warning" client dropdb --if-exists --force -- "$1"
    client createdb -E UTF8 -T template0 -- "$1"
    ;;
  *) usage ;;
esac
